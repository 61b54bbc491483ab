package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
)

// ctWeights is a compressed-tensors quantization scheme's "weights".
type ctWeights struct {
	NumBits        int       `json:"num_bits"`
	Type           string    `json:"type"`
	Strategy       string    `json:"strategy"`
	BlockStructure *[2]int64 `json:"block_structure,omitempty"`
	Symmetric      bool      `json:"symmetric"`
	Dynamic        bool      `json:"dynamic"`
}

type ctGroup struct {
	Targets          []string  `json:"targets"`
	Weights          ctWeights `json:"weights"`
	InputActivations *struct{} `json:"input_activations"`
}

type ctConfig struct {
	QuantMethod        string             `json:"quant_method"`
	Format             string             `json:"format"`
	QuantizationStatus string             `json:"quantization_status"`
	ConfigGroups       map[string]ctGroup `json:"config_groups"`
	Ignore             []string           `json:"ignore"`
}

type deepSeekConfig struct {
	QuantMethod         string   `json:"quant_method"`
	Fmt                 string   `json:"fmt"`
	ActivationScheme    string   `json:"activation_scheme"`
	WeightBlockSize     [2]int64 `json:"weight_block_size"`
	ModulesToNotConvert []string `json:"modules_to_not_convert,omitempty"`
}

// quantizationConfig returns the quantization_config that declares FP8
// weights of elem quantized with s in format f; ignore lists the linear
// modules left unquantized (lm_head among them). compressed-tensors gets
// them as "ignore"; DeepSeek's config has no such list in the wild, so it
// gets transformers' "modules_to_not_convert" only when there are others
// than lm_head, which transformers never converts.
func quantizationConfig(f ScaleFormat, s Scale, elem dtype.DType, ignore []string) json.RawMessage {
	var v any
	if f == DeepSeek {
		fmtName := "e4m3"
		if elem == dtype.F8_E5M2 {
			fmtName = "e5m2"
		}
		c := deepSeekConfig{QuantMethod: "fp8", Fmt: fmtName, ActivationScheme: "dynamic", WeightBlockSize: [2]int64{s.Block, s.Block}}
		if slices.ContainsFunc(ignore, func(m string) bool { return m != "lm_head" }) {
			c.ModulesToNotConvert = ignore
		}
		v = c
	} else {
		w := ctWeights{NumBits: 8, Type: "float", Strategy: s.Granularity.String(), Symmetric: true}
		if s.Granularity == quant.PerBlock {
			w.BlockStructure = &[2]int64{s.Block, s.Block}
		}
		if ignore == nil {
			ignore = []string{}
		}
		v = ctConfig{QuantMethod: "compressed-tensors", Format: "float-quantized", QuantizationStatus: "compressed",
			ConfigGroups: map[string]ctGroup{"group_0": {Targets: []string{"Linear"}, Weights: w}}, Ignore: ignore}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("convert: marshaling a fixed config: " + err.Error())
	}
	return b
}

// editConfig returns the JSON object src with the top-level keys in set
// replaced (or added at the end) and those in del removed, keeping the
// other keys, their order and their values as written, indented with two
// spaces as transformers writes config.json.
func editConfig(src []byte, set map[string]json.RawMessage, del []string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	type kv struct {
		k string
		v json.RawMessage
	}
	var kvs []kv
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, fmt.Errorf("key %q appears twice", k)
		}
		seen[k] = true
		if slices.Contains(del, k) {
			continue
		}
		if nv, ok := set[k]; ok {
			v = nv
		}
		kvs = append(kvs, kv{k, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the object")
	}
	for _, k := range sortedKeys(set) {
		if !seen[k] {
			kvs = append(kvs, kv{k, set[k]})
		}
	}
	var b bytes.Buffer
	b.WriteString("{")
	for i, e := range kvs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  ")
		kb, _ := json.Marshal(e.k)
		b.Write(kb)
		b.WriteString(": ")
		var iv bytes.Buffer
		if err := json.Indent(&iv, e.v, "  ", "  "); err != nil {
			return nil, err
		}
		b.Write(iv.Bytes())
	}
	if len(kvs) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// torchDTypeName is the name transformers' config gives a dtype.
func torchDTypeName(d dtype.DType) string {
	switch d {
	case dtype.F32:
		return "float32"
	case dtype.BF16:
		return "bfloat16"
	case dtype.F16:
		return "float16"
	case dtype.F64:
		return "float64"
	}
	return ""
}
