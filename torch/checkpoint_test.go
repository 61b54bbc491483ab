package torch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
)

// tinyPickle is a training checkpoint as torch.save writes it, built opcode
// by opcode: {"model": OrderedDict(...) with its _metadata attribute,
// "epoch": 3, "lr": 3e-4, "name": "run1", "flags": [True, None]}.
func tinyPickle() []byte {
	p := newPK().op(opEMPTY_DICT).put(0).op(opMARK)
	p.str("model").orderedDict().put(1).op(opMARK)
	p.str("w").tensor(ts{storage: "FloatStorage", key: "0", numel: 6, shape: []int64{2, 3}, stride: []int64{3, 1}}).put(2)
	p.str("w_t").tensor(ts{storage: "FloatStorage", key: "0", numel: 6, shape: []int64{3, 2}, stride: []int64{1, 3}})
	p.str("row").tensor(ts{storage: "FloatStorage", key: "0", numel: 6, offset: 3, shape: []int64{3}, stride: []int64{1}})
	p.str("tied").get(2) // the same tensor object, as a state dict of tied modules has
	p.str("tied2").tensor(ts{storage: "FloatStorage", key: "0", numel: 6, shape: []int64{2, 3}, stride: []int64{3, 1}})
	p.str("e4m3").tensor(ts{storage: "UntypedStorage", key: "1", numel: 4, shape: []int64{2, 2}, stride: []int64{2, 1}, v3: "float8_e4m3fn"})
	p.str("s").tensor(ts{storage: "BFloat16Storage", key: "2", numel: 1, shape: []int64{}, stride: []int64{}})
	p.str("empty").tensor(ts{storage: "FloatStorage", key: "3", numel: 0, shape: []int64{0, 4}, stride: []int64{4, 1}})
	// A Parameter: _rebuild_parameter(tensor, requires_grad, OrderedDict()).
	p.str("p").global("torch._utils", "_rebuild_parameter").op(opMARK)
	p.tensor(ts{storage: "HalfStorage", key: "4", numel: 2, shape: []int64{2}, stride: []int64{1}})
	p.op(opNEWTRUE).orderedDict().op(opTUPLE, opREDUCE)
	p.op(opSETITEMS)
	// state_dict()'s _metadata attribute, set by BUILD.
	p.op(opEMPTY_DICT).str("_metadata").orderedDict().op(opMARK).str("").op(opEMPTY_DICT).str("version").int(1).op(opSETITEM, opSETITEMS)
	p.op(opSETITEM, opBUILD)
	p.str("epoch").int(3).str("lr").float(3e-4).str("name").str("run1")
	p.str("flags").op(opEMPTY_LIST).op(opMARK, opNEWTRUE, opNONE, opAPPENDS)
	return p.op(opSETITEMS).bytes()
}

func tinyZip(prefix string) []byte {
	return torchZip(prefix, tinyPickle(), "little", map[string][]byte{
		"0": seq(6),
		"1": {0x38, 0x40, 0xb8, 0x00}, // 1, 2, -1, 0 in F8_E4M3
		"2": {0x80, 0x3f},             // 1.0 in BF16
		"3": {},
		"4": {0x00, 0x3c, 0x00, 0xc0}, // 1, -2 in F16
	})
}

// TestTinyCheckpoint reads a PyTorch zip checkpoint built byte by byte:
// nested dicts flatten, ties become aliases, views of one storage are each
// their own contiguous tensor, non-tensor values become metadata.
func TestTinyCheckpoint(t *testing.T) {
	for _, prefix := range []string{"archive/", "my model.v2/", ""} {
		c, err := openBytes(t, tinyZip(prefix))
		if err != nil {
			t.Fatalf("%q: %v", prefix, err)
		}
		wantNames := []string{"model.w", "model.w_t", "model.row", "model.e4m3", "model.s", "model.empty", "model.p"}
		if got := c.Names(); !slices.Equal(got, wantNames) {
			t.Errorf("names %v", got)
		}
		if got := c.Aliases(); !maps.Equal(got, map[string]string{"model.tied": "model.w", "model.tied2": "model.w"}) {
			t.Errorf("aliases %v", got)
		}
		wantMeta := map[string]string{"epoch": "3", "lr": "0.0003", "name": "run1", "flags.0": "True", "flags.1": "None"}
		if got := c.Metadata(); !maps.Equal(got, wantMeta) {
			t.Errorf("metadata %v", got)
		}
		for _, w := range []struct {
			name   string
			dt     dtype.DType
			shape  []int64
			data   []byte
			contig bool
		}{
			{"model.w", dtype.F32, []int64{2, 3}, seq(6), true},
			{"model.w_t", dtype.F32, []int64{3, 2}, f32(0, 3, 1, 4, 2, 5), false},
			{"model.row", dtype.F32, []int64{3}, f32(3, 4, 5), true},
			{"model.tied", dtype.F32, []int64{2, 3}, seq(6), true},
			{"model.e4m3", dtype.F8_E4M3, []int64{2, 2}, []byte{0x38, 0x40, 0xb8, 0x00}, true},
			{"model.s", dtype.BF16, []int64{}, []byte{0x80, 0x3f}, true},
			{"model.empty", dtype.F32, []int64{0, 4}, []byte{}, true},
			{"model.p", dtype.F16, []int64{2}, []byte{0x00, 0x3c, 0x00, 0xc0}, true},
		} {
			tn, err := c.Tensor(w.name)
			if err != nil {
				t.Fatal(err)
			}
			if tn.DType() != w.dt || !slices.Equal(tn.Shape(), w.shape) || tn.Contiguous() != w.contig {
				t.Errorf("%s: %s %v contiguous %v", w.name, tn.DType(), tn.Shape(), tn.Contiguous())
			}
			b, err := tn.Bytes()
			if err != nil || !bytes.Equal(b, w.data) {
				t.Errorf("%s: bytes %v, %v; want %v", w.name, b, err, w.data)
			}
			var buf bytes.Buffer
			if n, err := tn.WriteTo(&buf); err != nil || n != int64(len(w.data)) || !bytes.Equal(buf.Bytes(), w.data) {
				t.Errorf("%s: WriteTo %d, %v", w.name, n, err)
			}
		}
		if _, err := c.Tensor("model.missing"); !errors.Is(err, ErrTensorNotFound) {
			t.Errorf("missing tensor: %v", err)
		}
		tw, _ := c.Tensor("model.w")
		if err := tw.ReadTo(make([]byte, 5)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("short buffer: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Bytes(); !errors.Is(err, ErrClosed) {
			t.Errorf("after Close: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
}

// TestStridedChunks gathers a transposed view larger than WriteTo's buffer,
// so that a chunk starts in the middle of a row.
func TestStridedChunks(t *testing.T) {
	const rows, cols = 701, 613
	pkl := stateDict(ts{name: "t", storage: "FloatStorage", key: "0", numel: rows * cols, shape: []int64{cols, rows}, stride: []int64{1, cols}},
		ts{name: "s", storage: "FloatStorage", key: "0", numel: rows * cols, offset: 1, shape: []int64{rows, cols / 2}, stride: []int64{cols, 2}})
	c, err := openBytes(t, torchZip("x/", pkl, "little", map[string][]byte{"0": seq(rows * cols)}))
	if err != nil {
		t.Fatal(err)
	}
	tt, _ := c.Tensor("t")
	var buf bytes.Buffer
	if _, err := tt.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	got := buf.Bytes()
	for j := range cols {
		for i := range rows {
			v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*(j*rows+i):]))
			if v != float32(i*cols+j) {
				t.Fatalf("t[%d][%d] = %v", j, i, v)
			}
		}
	}
	b, _ := tt.Bytes()
	if !bytes.Equal(b, got) {
		t.Error("Bytes and WriteTo differ")
	}
	ts, _ := c.Tensor("s")
	b, err = ts.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		for j := range cols / 2 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(b[4*(i*(cols/2)+j):]))
			if v != float32(1+i*cols+2*j) {
				t.Fatalf("s[%d][%d] = %v", i, j, v)
			}
		}
	}
}

func TestBigEndian(t *testing.T) {
	be := func(vs ...float32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.BigEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	pkl := stateDict(
		ts{name: "w", storage: "FloatStorage", key: "0", numel: 4, shape: []int64{2, 2}, stride: []int64{2, 1}},
		ts{name: "wt", storage: "FloatStorage", key: "0", numel: 4, shape: []int64{2, 2}, stride: []int64{1, 2}},
		ts{name: "c", storage: "ComplexFloatStorage", key: "1", numel: 1, shape: []int64{1}, stride: []int64{1}},
		ts{name: "b", storage: "ByteStorage", key: "2", numel: 2, shape: []int64{2}, stride: []int64{1}},
	)
	c, err := openBytes(t, torchZip("a/", pkl, "big", map[string][]byte{"0": be(1, 2, 3, 4), "1": be(5, 6), "2": {7, 8}}))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"w": f32(1, 2, 3, 4), "wt": f32(1, 3, 2, 4), "c": f32(5, 6), "b": {7, 8}} {
		tn, _ := c.Tensor(name)
		b, err := tn.Bytes()
		if err != nil || !bytes.Equal(b, want) {
			t.Errorf("%s: %v %v, want %v", name, b, err, want)
		}
		var buf bytes.Buffer
		if _, err := tn.WriteTo(&buf); err != nil || !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%s: WriteTo %v %v", name, buf.Bytes(), err)
		}
	}
}

func TestCheckpointRefusals(t *testing.T) {
	w := func(t ts) ts {
		if t.name == "" {
			t.name = "w"
		}
		if t.storage == "" {
			t.storage = "FloatStorage"
		}
		if t.key == "" {
			t.key = "0"
		}
		return t
	}
	one := func(x ts, rec []byte) []byte {
		return torchZip("archive/", stateDict(w(x)), "little", map[string][]byte{"0": rec})
	}
	hooks := newPK().op(opEMPTY_DICT).str("w").global("torch._utils", "_rebuild_tensor_v2").op(opMARK)
	hooks.op(opMARK).str("storage").global("torch", "FloatStorage").str("0").str("cpu").int(1).op(opTUPLE, opBINPERSID)
	hooks.int(0).ints([]int64{1}).ints([]int64{1}).op(opNEWFALSE).orderedDict().str("k").int(1).op(opSETITEM, opTUPLE, opREDUCE, opSETITEM)
	negBit := newPK().op(opEMPTY_DICT).str("w").global("torch._utils", "_rebuild_tensor_v2").op(opMARK)
	negBit.op(opMARK).str("storage").global("torch", "FloatStorage").str("0").str("cpu").int(1).op(opTUPLE, opBINPERSID)
	negBit.int(0).ints([]int64{1}).ints([]int64{1}).op(opNEWFALSE).orderedDict().op(opEMPTY_DICT).str("neg_bit").op(opNEWTRUE, opSETITEM, opTUPLE, opREDUCE, opSETITEM)
	dup := newPK().op(opEMPTY_DICT, opMARK).str("a.b").tensor(w(ts{numel: 1, shape: []int64{1}, stride: []int64{1}}))
	dup.str("a").op(opEMPTY_DICT).str("b").int(1).op(opSETITEM, opSETITEMS)

	for _, c := range []struct {
		name string
		data []byte
		kind failure
		msg  string
	}{
		{"missing record", torchZip("archive/", stateDict(w(ts{numel: 1, shape: []int64{1}, stride: []int64{1}})), "little", nil), missingRecord, `storage "0" has no record`},
		{"compressed record", buildZip([]zent{
			{name: "archive/data.pkl", data: stateDict(w(ts{numel: 1, shape: []int64{1}, stride: []int64{1}}))},
			{name: "archive/data/0", data: f32(1), deflate: true}}), compressedRecord, "compressed"},
		{"record too short", one(ts{numel: 6, shape: []int64{6}, stride: []int64{1}}, seq(5)), storageSize, "record holds 20 bytes"},
		{"record too long", one(ts{numel: 6, shape: []int64{6}, stride: []int64{1}}, seq(7)), storageSize, ""},
		{"past the end", one(ts{numel: 6, offset: 5, shape: []int64{2}, stride: []int64{1}}, seq(6)), tensorBounds, "reach past"},
		{"stride past the end", one(ts{numel: 6, shape: []int64{2, 3}, stride: []int64{4, 1}}, seq(6)), tensorBounds, ""},
		{"negative offset", one(ts{numel: 6, offset: -1, shape: []int64{2}, stride: []int64{1}}, seq(6)), tensorBounds, ""},
		{"negative stride", one(ts{numel: 6, offset: 5, shape: []int64{2}, stride: []int64{-1}}, seq(6)), tensorBounds, ""},
		{"negative size", one(ts{numel: 6, shape: []int64{-2}, stride: []int64{1}}, seq(6)), tensorBounds, ""},
		{"overflowing size", one(ts{numel: 6, shape: []int64{1 << 40, 1 << 40}, stride: []int64{1, 1}}, seq(6)), tensorBounds, ""},
		{"overflowing stride", one(ts{numel: 6, shape: []int64{3}, stride: []int64{math.MaxInt64 / 2}}, seq(6)), tensorBounds, ""},
		{"empty past the end", one(ts{numel: 6, offset: 7, shape: []int64{0}, stride: []int64{1}}, seq(6)), tensorBounds, ""},
		{"expanded view", one(ts{numel: 6, shape: []int64{1000}, stride: []int64{0}}, seq(6)), tensorBounds, "expanded or overlapping"},
		{"overflowing numel", one(ts{numel: math.MaxInt64 / 2, shape: []int64{1}, stride: []int64{1}}, seq(6)), storageSize, ""},
		{"backward hooks", torchZip("archive/", hooks.bytes(), "little", map[string][]byte{"0": f32(1)}), unsupportedValue, "backward hooks"},
		{"neg bit", torchZip("archive/", negBit.bytes(), "little", map[string][]byte{"0": f32(1)}), unsupportedValue, "neg_bit"},
		{"duplicate flattened name", torchZip("archive/", dup.bytes(), "little", map[string][]byte{"0": f32(1)}), duplicateName, ""},
		{"byteorder", torchZip("archive/", stateDict(), "middle", nil), byteOrder, `"middle"`},
		{"byteorder too long", torchZip("archive/", stateDict(), strings.Repeat("little", 20), nil), limit, ""},
		{"no data.pkl", buildZip([]zent{{name: "archive/data/0", data: f32(1)}}), invalidArchive, "no data.pkl"},
		{"two data.pkl", buildZip([]zent{{name: "a/data.pkl", data: stateDict()}, {name: "b/data.pkl", data: stateDict()}}), invalidArchive, "ambiguous"},
		{"duplicate record", buildZip([]zent{{name: "a/data.pkl", data: stateDict()}, {name: "a/data.pkl", data: stateDict()}}), invalidArchive, "twice"},
		{"not a zip", []byte("hello, this is not a checkpoint"), invalidArchive, "not a readable zip"},
		{"empty file", nil, invalidArchive, ""},
		{"bare pickle", stateDict(), invalidArchive, "bare pickle"},
		{"legacy", append(append([]byte{0x80, 0x02}, legacyMagic...), ".\x80\x02M\xe9\x03."...), legacyFormat,
			"legacy format: the pre-1.6 PyTorch format; re-save with torch.save(..., _use_new_zipfile_serialization=True)"},
		{"legacy tar", append(make([]byte, 257), "ustar\x0000"+strings.Repeat("\x00", 300)...), legacyFormat, "tar"},
		{"forbidden global", torchZip("evil/", evilPickle("posix", "system"), "little", map[string][]byte{"0": seq(4)}), failure{Kind: ErrForbiddenGlobal, What: ""}, `global "posix system"`},
		{"malformed pickle", torchZip("archive/", []byte("\x80\x02}"), "little", nil), invalidPickle, "archive/data.pkl"},
	} {
		_, err := openBytes(t, c.data)
		var e *Error
		if !c.kind.Matches(err) || !errors.As(err, &e) {
			t.Errorf("%s: got %v, want %s", c.name, err, c.kind)
			continue
		}
		if !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), "test.pt") {
			t.Errorf("%s: message %q lacks %q or the file name", c.name, err, c.msg)
		}
	}
}

// TestDataPklCompressed: a re-zipped archive whose data.pkl is deflated is
// still read (only tensor data must be stored).
func TestDataPklCompressed(t *testing.T) {
	pkl := stateDict(ts{name: "w", storage: "FloatStorage", key: "0", numel: 2, shape: []int64{2}, stride: []int64{1}})
	c, err := openBytes(t, buildZip([]zent{{name: "m/data.pkl", data: pkl, deflate: true}, {name: "m/data/0", data: f32(1, 2)}}))
	if err != nil {
		t.Fatal(err)
	}
	tn, _ := c.Tensor("w")
	if b, err := tn.Bytes(); err != nil || !bytes.Equal(b, f32(1, 2)) {
		t.Fatalf("%v %v", b, err)
	}
	// A data.pkl deeper in the archive than another is not the checkpoint's.
	c, err = openBytes(t, buildZip([]zent{{name: "m/data.pkl", data: pkl}, {name: "m/data/0", data: f32(1, 2)},
		{name: "m/data/data.pkl", data: []byte("junk")}}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 1 {
		t.Fatal(c.Names())
	}
}

func TestNewReaderArguments(t *testing.T) {
	if _, err := NewReader(nil, 0, "x"); !errors.Is(err, ErrInvalidArgument) {
		t.Error(err)
	}
	if _, err := NewReader(bytes.NewReader(nil), -1, "x"); !errors.Is(err, ErrInvalidArgument) {
		t.Error(err)
	}
}
