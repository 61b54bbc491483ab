package convert

import (
	"encoding/json"
	"testing"
)

// FuzzEditConfig: a hostile config.json never makes editConfig panic, and
// what it returns is a JSON object with the keys set and without those
// deleted.
func FuzzEditConfig(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": 1, "quantization_config": {"x": [1, 2]}}`, `{"a":1,"a":2}`, `[1]`, `{"a": 1} x`, `{"a": "\u00e9"}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		set := map[string]json.RawMessage{"quantization_config": json.RawMessage(`{"quant_method":"fp8"}`), "torch_dtype": json.RawMessage(`"bfloat16"`)}
		out, err := editConfig(b, set, []string{"compression_config"})
		if err != nil {
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(out, &obj); err != nil {
			t.Fatalf("%q -> %q: not a JSON object: %v", b, out, err)
		}
		if _, ok := obj["compression_config"]; ok {
			t.Fatalf("%q -> %q: deleted key kept", b, out)
		}
		for k := range set {
			if _, ok := obj[k]; !ok {
				t.Fatalf("%q -> %q: key %s not set", b, out, k)
			}
		}
	})
}

// FuzzWeightsName: any name parses without panicking, and a name it
// accepts gives back its prefix and variant through the names a set of
// that prefix and variant has.
func FuzzWeightsName(f *testing.F) {
	for _, s := range []string{"model.safetensors", "model.fp16-00001-of-00002.safetensors", "x.safetensors.index.bf16.json", "a-00001-of-00002.v.safetensors", "..safetensors", "-00001-of-00002.safetensors"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		prefix, variant, ok := weightsName(name)
		if !ok {
			return
		}
		single := prefix + ".safetensors"
		index := prefix + ".safetensors.index.json"
		if variant != "" {
			single = prefix + "." + variant + ".safetensors"
			index = prefix + ".safetensors.index." + variant + ".json"
		}
		for _, n := range []string{single, index} {
			if p, v, ok := weightsName(n); !ok || p != prefix || v != variant {
				t.Fatalf("%q -> %q %q; %q -> %q %q %v", name, prefix, variant, n, p, v, ok)
			}
		}
	})
}

// FuzzParseScale: any text parses or fails without panicking, and what
// parses prints back to an equal Scale.
func FuzzParseScale(f *testing.F) {
	for _, s := range []string{"tensor", "channel", "block", "block:64", "none", "block:0", "block:-1", "rows", "block:99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseScale(s)
		if err != nil {
			return
		}
		back, err := ParseScale(sc.String())
		if err != nil || back != sc {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, sc, sc.String(), back, err)
		}
	})
}

// FuzzIncompleteMarker: hostile bytes in an IncompleteName marker never
// make parseIncomplete panic; what it accepts is Save's format in one of
// the two states, and comes back the same when written anew.
func FuzzIncompleteMarker(f *testing.F) {
	for _, s := range []string{`{"format":"ckpt.incomplete/v1","state":"saving","seq":1,"at":"2026-11-25T00:00:00Z"}`,
		`{"format":"ckpt.incomplete/v1","state":"removing","seq":-1,"at":"2026-11-25T01:00:00+01:00"}`, `{"format":"ckpt.incomplete/v1","state":"done"}`,
		`{"format":"ckpt.checkpoint/v1"}`, `{"state":"saving","state":"removing","format":"ckpt.incomplete/v1"}`, `null`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseIncomplete(b)
		if err != nil {
			return
		}
		if m.Format != incompleteFormat || (m.State != stateSaving && m.State != stateRemoving) {
			t.Fatalf("%q accepted as %+v", b, m)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if m2, err := parseIncomplete(again); err != nil || m2.Format != m.Format || m2.State != m.State || m2.Seq != m.Seq || !m2.At.Equal(m.At) {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", b, m, again, m2, err)
		}
	})
}
