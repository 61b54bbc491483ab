package shard

import (
	"errors"
	"reflect"
	"testing"
)

func FuzzParseIndex(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`,
		`{"weight_map":{"a":"../x.safetensors"}}`,
		`{"weight_map":{"a":"C:\\x.safetensors"}}`,
		`{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}`,
		`{"weight_map":{}}`,
		`{"weight_map":[]}`,
		`{"metadata":[],"weight_map":{"a":"x.safetensors"}}`,
		`{"metadata":{"total_size":1e3},"weight_map":{"a":"x.safetensors"},"x":[1,{"y":null}]}`,
		`{"weight_map":{"a":"x.safetensors"}} trailing`,
		`[`, ``, `null`, `{"weight_map":{"\u0000":"x.safetensors"}}`,
		`{"weight_map":{"a\"b":"x.safetensors","c\u00e9":"y.safetensors"}, "metadata": {"total_size": 12}}`,
		"{\"weight_map\":{\"\xff\":\"x.safetensors\"}}",
		` { "metadata" : null , "weight_map" : { "a" : "x.safetensors" } } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if fast, ok := parseIndexFast(data); ok {
			slow, err := parseIndexSlow(data)
			if err != nil {
				t.Fatalf("fast path accepted what the slow path rejects: %v", err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast %+v\nslow %+v", fast, slow)
			}
		}
		ix, err := ParseIndex(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind.String() == "unknown" {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			if ix != nil {
				t.Fatal("index returned with an error")
			}
			return
		}
		if len(ix.WeightMap) == 0 || len(ix.Names()) != len(ix.WeightMap) {
			t.Fatalf("accepted an empty or inconsistent map: %+v", ix)
		}
		for name, s := range ix.WeightMap {
			if name == "" {
				t.Fatal("accepted an empty tensor name")
			}
			if err := CheckShardName(s); err != nil {
				t.Fatalf("accepted shard %q: %v", s, err)
			}
		}
		if ix.TotalSize < 0 {
			t.Fatalf("negative total size %d", ix.TotalSize)
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"5GB", "4GiB", "123", "1.5 mb", "-1", "9e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		if err != nil && !invalidSize.Matches(err) {
			t.Fatalf("ParseSize(%q): %v", s, err)
		}
	})
}
