package quant

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// Where a quantization config can come from, in the order Detect looks.
const (
	srcConfigJSON   = "config.json quantization_config"
	srcHFQuant      = "hf_quant_config.json"
	srcMetadataQC   = "__metadata__ quantization_config"
	srcComfyMeta    = "__metadata__ _quantization_metadata"
	srcComfyTensors = "comfy_quant tensors"
	srcScaledFP8    = "scaled_fp8 marker"
	srcTensorNames  = "tensor names"
)

// maxBlock bounds block and group sizes read from a config. Sizes are only
// used in arithmetic, never to allocate; the bound keeps that arithmetic far
// from overflow.
const maxBlock = 1 << 40

// object is a decoded JSON object with the path of its place in the config,
// for error messages.
type object struct {
	m    map[string]json.RawMessage
	path string // e.g. "config.json quantization_config"
	file bool   // the object is a whole file: its fields read "FILE KEY"
}

// parseObject decodes b, which must hold one JSON object.
func parseObject(b []byte, path string) (object, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return object{}, configErr(path, "not a JSON object", err)
	}
	if m == nil { // "null"
		return object{}, configErr(path, "not a JSON object", nil)
	}
	return object{m: m, path: path}, nil
}

func (o object) field(k string) string {
	switch {
	case o.path == "":
		return k
	case o.file:
		return o.path + " " + k
	}
	return o.path + "." + k
}

// raw returns the value of k, nil when absent or null.
func (o object) raw(k string) json.RawMessage {
	v, ok := o.m[k]
	if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil
	}
	return v
}

// has reports whether k is present and not null.
func (o object) has(k string) bool { return o.raw(k) != nil }

// str returns the string at k ("" when absent or null).
func (o object) str(k string) (string, error) {
	v := o.raw(k)
	if v == nil {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", configErr(o.field(k), "not a string", nil)
	}
	return s, nil
}

// strs returns the list of strings at k (nil when absent or null). A single
// string is accepted as a list of one.
func (o object) strs(k string) ([]string, error) {
	v := o.raw(k)
	if v == nil {
		return nil, nil
	}
	var l []string
	if err := json.Unmarshal(v, &l); err != nil {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return []string{s}, nil
		}
		return nil, configErr(o.field(k), "not a list of strings", nil)
	}
	return l, nil
}

// num returns the number at k; ok is false when absent or null.
func (o object) num(k string) (v float64, ok bool, err error) {
	r := o.raw(k)
	if r == nil {
		return 0, false, nil
	}
	if err := json.Unmarshal(r, &v); err != nil {
		return 0, false, configErr(o.field(k), "not a number", nil)
	}
	return v, true, nil
}

// size returns the positive integer at k (a block or group size); ok is
// false when absent or null.
func (o object) size(k string) (int64, bool, error) {
	v, ok, err := o.num(k)
	if !ok || err != nil {
		return 0, ok, err
	}
	n, err := toSize(v, o.field(k))
	return n, true, err
}

func toSize(v float64, field string) (int64, error) {
	if v != math.Trunc(v) || v < 1 || v > maxBlock {
		return 0, configErr(field, "not a positive integer size: "+strconv.FormatFloat(v, 'g', -1, 64), nil)
	}
	return int64(v), nil
}

// block2 returns the two-element block size at k ([rows, cols]); ok is false
// when absent or null. A string "RxC" is accepted too.
func (o object) block2(k string) ([2]int64, bool, error) {
	var b [2]int64
	r := o.raw(k)
	if r == nil {
		return b, false, nil
	}
	var l []float64
	if err := json.Unmarshal(r, &l); err != nil {
		var s string
		if json.Unmarshal(r, &s) != nil {
			return b, false, configErr(o.field(k), "not a list of two sizes", nil)
		}
		a, c, found := strings.Cut(strings.ToLower(s), "x")
		x, e1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
		y, e2 := strconv.ParseFloat(strings.TrimSpace(c), 64)
		if !found || e1 != nil || e2 != nil {
			return b, false, configErr(o.field(k), "not a list of two sizes", nil)
		}
		l = []float64{x, y}
	}
	if len(l) != 2 {
		return b, false, configErr(o.field(k), "want two sizes [rows, cols], got "+strconv.Itoa(len(l)), nil)
	}
	for i, v := range l {
		n, err := toSize(v, o.field(k))
		if err != nil {
			return b, false, err
		}
		b[i] = n
	}
	return b, true, nil
}

// obj returns the object at k; ok is false when absent or null.
func (o object) obj(k string) (object, bool, error) {
	r := o.raw(k)
	if r == nil {
		return object{}, false, nil
	}
	sub, err := parseObject(r, o.field(k))
	return sub, err == nil, err
}

// qconfig is a quantization config found in one of the sources.
type qconfig struct {
	source string // one of the src constants
	method string // quant_method, lower case ("modelopt" for hf_quant_config.json)
	obj    object
}

// findConfig returns the first quantization config of src, in the order
// config.json, hf_quant_config.json, __metadata__ quantization_config; nil
// when there is none.
func findConfig(src Sources) (*qconfig, error) {
	if len(bytes.TrimSpace(src.ConfigJSON)) > 0 {
		top, err := parseObject(src.ConfigJSON, "config.json")
		if err != nil {
			return nil, err
		}
		top.file = true
		// compression_config: the key early compressed-tensors versions wrote.
		for _, k := range []string{"quantization_config", "compression_config"} {
			if q, ok, err := top.obj(k); err != nil {
				return nil, err
			} else if ok {
				return withMethod(srcConfigJSON, q)
			}
		}
	}
	if len(bytes.TrimSpace(src.HFQuantConfig)) > 0 {
		top, err := parseObject(src.HFQuantConfig, srcHFQuant)
		if err != nil {
			return nil, err
		}
		top.file = true
		q, ok, err := top.obj("quantization")
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, configErr(top.field("quantization"), "missing", nil)
		}
		return &qconfig{source: srcHFQuant, method: "modelopt", obj: q}, nil
	}
	if text, ok := src.Metadata["quantization_config"]; ok {
		q, err := parseObject([]byte(text), srcMetadataQC)
		if err != nil {
			return nil, err
		}
		return withMethod(srcMetadataQC, q)
	}
	return nil, nil
}

func withMethod(source string, q object) (*qconfig, error) {
	m, err := q.str("quant_method")
	if err != nil {
		return nil, err
	}
	return &qconfig{source: source, method: strings.ToLower(strings.TrimSpace(m)), obj: q}, nil
}
