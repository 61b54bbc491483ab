package torch

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// pk assembles a pickle opcode by opcode, as torch.save's pickler would.
type pk struct{ b []byte }

func newPK() *pk { return (&pk{}).op(opPROTO, 2) }

func (p *pk) op(b ...byte) *pk { p.b = append(p.b, b...); return p }

func (p *pk) global(mod, name string) *pk {
	p.op(opGLOBAL)
	p.b = append(p.b, mod+"\n"+name+"\n"...)
	return p
}

func (p *pk) str(s string) *pk {
	p.op(opBINUNICODE)
	p.b = binary.LittleEndian.AppendUint32(p.b, uint32(len(s)))
	p.b = append(p.b, s...)
	return p
}

func (p *pk) int(v int64) *pk {
	switch {
	case v >= 0 && v < 256:
		return p.op(opBININT1, byte(v))
	case v >= 0 && v < 65536:
		return p.op(opBININT2, byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		p.op(opBININT)
		p.b = binary.LittleEndian.AppendUint32(p.b, uint32(int32(v)))
		return p
	}
	p.op(opLONG1, 8)
	p.b = binary.LittleEndian.AppendUint64(p.b, uint64(v))
	return p
}

func (p *pk) float(f float64) *pk {
	p.op(opBINFLOAT)
	p.b = binary.BigEndian.AppendUint64(p.b, math.Float64bits(f))
	return p
}

func (p *pk) ints(vs []int64) *pk {
	if len(vs) == 0 {
		return p.op(opEMPTY_TUPLE)
	}
	p.op(opMARK)
	for _, v := range vs {
		p.int(v)
	}
	return p.op(opTUPLE)
}

func (p *pk) orderedDict() *pk {
	return p.global("collections", "OrderedDict").op(opEMPTY_TUPLE, opREDUCE)
}

func (p *pk) put(i byte) *pk { return p.op(opBINPUT, i) }
func (p *pk) get(i byte) *pk { return p.op(opBINGET, i) }

func (p *pk) bytes() []byte { return append(p.b, opSTOP) }

// ts describes a tensor for tensor(): a view of storage key of the given
// storage type ("FloatStorage", or "UntypedStorage" with v3 set to a
// dtype name) holding numel elements.
type ts struct {
	name          string
	storage       string
	key           string
	numel         int64
	offset        int64
	shape, stride []int64
	v3            string
}

// tensor emits the _rebuild_tensor_v2/_v3 call torch.save writes.
func (p *pk) tensor(t ts) *pk {
	if t.v3 != "" {
		p.global("torch._utils", "_rebuild_tensor_v3")
	} else {
		p.global("torch._utils", "_rebuild_tensor_v2")
	}
	p.op(opMARK)
	p.op(opMARK).str("storage")
	if t.storage == "UntypedStorage" {
		p.global("torch.storage", "UntypedStorage")
	} else {
		p.global("torch", t.storage)
	}
	p.str(t.key).str("cpu").int(t.numel).op(opTUPLE, opBINPERSID)
	p.int(t.offset).ints(t.shape).ints(t.stride).op(opNEWFALSE).orderedDict()
	if t.v3 != "" {
		p.global("torch", t.v3)
	}
	return p.op(opTUPLE, opREDUCE)
}

// stateDict is the pickle of an OrderedDict of the tensors, in order.
func stateDict(tensors ...ts) []byte {
	p := newPK().orderedDict().op(opMARK)
	for _, t := range tensors {
		p.str(t.name).tensor(t)
	}
	return p.op(opSETITEMS).bytes()
}

// zent is one record of a zip built by buildZip.
type zent struct {
	name    string
	data    []byte
	deflate bool
}

// buildZip writes a zip archive byte by byte: local headers, data,
// central directory, end record. Records are stored unless deflate is set.
func buildZip(ents []zent) []byte {
	var out, cd bytes.Buffer
	le := binary.LittleEndian
	for _, e := range ents {
		body, method := e.data, uint16(0)
		if e.deflate {
			var b bytes.Buffer
			w, _ := flate.NewWriter(&b, flate.BestSpeed)
			w.Write(e.data)
			w.Close()
			body, method = b.Bytes(), 8
		}
		crc := crc32.ChecksumIEEE(e.data)
		off := uint32(out.Len())
		var h []byte
		h = le.AppendUint32(h, 0x04034b50)
		h = le.AppendUint16(h, 20)
		h = le.AppendUint16(h, 0) // flags
		h = le.AppendUint16(h, method)
		h = le.AppendUint32(h, 0) // time, date
		h = le.AppendUint32(h, crc)
		h = le.AppendUint32(h, uint32(len(body)))
		h = le.AppendUint32(h, uint32(len(e.data)))
		h = le.AppendUint16(h, uint16(len(e.name)))
		h = le.AppendUint16(h, 0)
		out.Write(h)
		out.WriteString(e.name)
		out.Write(body)

		var c []byte
		c = le.AppendUint32(c, 0x02014b50)
		c = le.AppendUint16(c, 20)
		c = le.AppendUint16(c, 20)
		c = le.AppendUint16(c, 0)
		c = le.AppendUint16(c, method)
		c = le.AppendUint32(c, 0)
		c = le.AppendUint32(c, crc)
		c = le.AppendUint32(c, uint32(len(body)))
		c = le.AppendUint32(c, uint32(len(e.data)))
		c = le.AppendUint16(c, uint16(len(e.name)))
		c = le.AppendUint16(c, 0) // extra
		c = le.AppendUint16(c, 0) // comment
		c = le.AppendUint16(c, 0) // disk
		c = le.AppendUint16(c, 0) // internal attributes
		c = le.AppendUint32(c, 0) // external attributes
		c = le.AppendUint32(c, off)
		cd.Write(c)
		cd.WriteString(e.name)
	}
	cdOff := uint32(out.Len())
	out.Write(cd.Bytes())
	var end []byte
	end = le.AppendUint32(end, 0x06054b50)
	end = le.AppendUint32(end, 0) // disk numbers
	end = le.AppendUint16(end, uint16(len(ents)))
	end = le.AppendUint16(end, uint16(len(ents)))
	end = le.AppendUint32(end, uint32(cd.Len()))
	end = le.AppendUint32(end, cdOff)
	end = le.AppendUint16(end, 0)
	out.Write(end)
	return out.Bytes()
}

// torchZip lays out a checkpoint as torch.save does: PREFIX/data.pkl,
// PREFIX/byteorder (unless byteorder is ""), PREFIX/data/KEY, version.
func torchZip(prefix string, pkl []byte, byteorder string, storages map[string][]byte) []byte {
	ents := []zent{{name: prefix + "data.pkl", data: pkl}, {name: prefix + ".format_version", data: []byte("1")}}
	if byteorder != "" {
		ents = append(ents, zent{name: prefix + "byteorder", data: []byte(byteorder)})
	}
	for _, k := range slices.Sorted(maps.Keys(storages)) {
		ents = append(ents, zent{name: prefix + "data/" + k, data: storages[k]})
	}
	ents = append(ents, zent{name: prefix + "version", data: []byte("3\n")})
	return buildZip(ents)
}

// f32 returns the little-endian bytes of float32 values.
func f32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// seq returns the little-endian float32 bytes of 0, 1, ..., n-1.
func seq(n int) []byte {
	vs := make([]float32, n)
	for i := range vs {
		vs[i] = float32(i)
	}
	return f32(vs...)
}

// openBytes opens a checkpoint held in memory.
func openBytes(t testing.TB, b []byte) (*Checkpoint, error) {
	t.Helper()
	return NewReader(bytes.NewReader(b), int64(len(b)), "test.pt")
}

// writeFile writes b to dir/name and returns the path.
func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
