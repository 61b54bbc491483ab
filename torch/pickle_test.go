package torch

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

// evilPickle is what torch.save writes for {"w": tensor, "x": obj} where
// obj's __reduce__ returns (os.system, ("echo pwned",)): the layout of
// ../shared/fixtures/torch/evil.pt.
func evilPickle(mod, name string) []byte {
	p := newPK().op(opEMPTY_DICT, opMARK)
	p.str("w").tensor(ts{storage: "FloatStorage", key: "0", numel: 4, shape: []int64{2, 2}, stride: []int64{2, 1}})
	p.str("x").global(mod, name).str("echo this-checkpoint-ran-code > /tmp/ckpt-pwned").op(opTUPLE1, opREDUCE)
	return p.op(opSETITEMS).bytes()
}

// TestUnpickleRefusesMaliciousPickle: a pickle that would run a command
// under torch.load is refused at its GLOBAL, with the global named as the
// pickle spells it, whatever the allow-list lookalike.
func TestUnpickleRefusesMaliciousPickle(t *testing.T) {
	for _, g := range []string{
		"posix system", "nt system", "os system", "commands Popen", "subprocess Popen",
		"builtins eval", "builtins exec", "__builtin__ eval", "builtins getattr", "runpy _run_code",
		"torch load", "torch.serialization load", "torch._utils _rebuild_qtensor",
		"torch._tensor _rebuild_from_type_v2", "torch Tensor", "torch Size", "collections defaultdict",
		"collections  OrderedDict", "collections OrderedDict ", "torch._utils _rebuild_tensor_v2x",
		"numpy.core.multiarray _reconstruct", "_codecs encode", "torch FooStorage", "torch float8_e4m3fnx",
	} {
		mod, name, _ := strings.Cut(g, " ")
		_, _, err := unpickle(evilPickle(mod, name), defaultLimits)
		var e *Error
		if !errors.Is(err, ErrForbiddenGlobal) || !errors.As(err, &e) || e.Global != g {
			t.Errorf("%q: got %v", g, err)
			continue
		}
		if !strings.Contains(err.Error(), `global "`+g+`"`) {
			t.Errorf("%q: message %q does not name the global", g, err)
		}
	}
}

func TestUnpickleStackGlobalRefused(t *testing.T) {
	p := (&pk{}).op(opPROTO, 4, opFRAME, 27, 0, 0, 0, 0, 0, 0, 0)
	p.op(opSHORT_BINUNICODE, 5).op([]byte("posix")...).op(opMEMOIZE)
	p.op(opSHORT_BINUNICODE, 6).op([]byte("system")...).op(opMEMOIZE)
	p.op(opSTACK_GLOBAL).str("id").op(opTUPLE1, opREDUCE)
	_, _, err := unpickle(p.bytes(), defaultLimits)
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrForbiddenGlobal || e.Global != "posix system" {
		t.Fatalf("got %v", err)
	}
}

func TestUnpickleUnsupportedOpcodes(t *testing.T) {
	for name, data := range map[string][]byte{
		"INST":      []byte("\x80\x02(X\x02\x00\x00\x00idiposix\nsystem\n."),
		"OBJ":       []byte("\x80\x02(ccollections\nOrderedDict\no."),
		"NEWOBJ":    []byte("\x80\x02ccollections\nOrderedDict\n)\x81."),
		"NEWOBJ_EX": []byte("\x80\x04ccollections\nOrderedDict\n)}\x92."),
		"EXT1":      []byte("\x80\x02\x82\x01."),
		"INT":       []byte("\x80\x02I1\n."),
		"STRING":    []byte("\x80\x02S'a'\n."),
		"PERSID":    []byte("\x80\x02P0\n."),
		"GET":       []byte("\x80\x02}g0\n."),
		"EMPTY_SET": []byte("\x80\x04\x8f."),
	} {
		_, _, err := unpickle(data, defaultLimits)
		if !unsupportedOpcode.Matches(err) {
			t.Errorf("%s: got %v", name, err)
			continue
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%s: message %q does not name the opcode", name, err)
		}
	}
	// INST names the class it would have called.
	_, _, err := unpickle([]byte("\x80\x02(X\x02\x00\x00\x00idiposix\nsystem\n."), defaultLimits)
	var e *Error
	if !errors.As(err, &e) || e.Global != "posix system" {
		t.Errorf("INST: got %v", err)
	}
}

func TestUnpickleUnsupportedDType(t *testing.T) {
	data := stateDict(ts{name: "c", storage: "UntypedStorage", key: "0", numel: 32, shape: []int64{2}, stride: []int64{1}, v3: "complex128"})
	_, _, err := unpickle(data, defaultLimits)
	var e *Error
	if !errors.As(err, &e) || !unsupportedDType.Matches(err) || e.Global != "torch complex128" {
		t.Fatalf("got %v", err)
	}
	data = stateDict(ts{name: "q", storage: "QInt8Storage", key: "0", numel: 2, shape: []int64{2}, stride: []int64{1}})
	if _, _, err := unpickle(data, defaultLimits); !unsupportedDType.Matches(err) {
		t.Fatalf("got %v", err)
	}
}

func TestUnpickleMalformed(t *testing.T) {
	u32 := func(op byte, n uint32) []byte { return binary.LittleEndian.AppendUint32([]byte{0x80, 2, op}, n) }
	u64 := func(op byte, n uint64) []byte { return binary.LittleEndian.AppendUint64([]byte{0x80, 4, op}, n) }
	tensorArgs := func(f func(p *pk)) []byte {
		p := newPK().op(opEMPTY_DICT).str("t").global("torch._utils", "_rebuild_tensor_v2")
		f(p)
		return p.op(opREDUCE, opSETITEM).bytes()
	}
	persid := func(f func(p *pk)) []byte {
		return tensorArgs(func(p *pk) {
			p.op(opMARK)
			f(p)
			p.op(opBINPERSID).int(0).ints([]int64{1}).ints([]int64{1}).op(opNEWFALSE).orderedDict().op(opTUPLE)
		})
	}
	for _, c := range []struct {
		name string
		data []byte
		kind failure
	}{
		{"empty", nil, invalidPickle},
		{"no STOP", []byte{0x80, 2, '}'}, invalidPickle},
		{"huge BINUNICODE", u32(opBINUNICODE, 0xffffffff), invalidPickle},
		{"huge BINBYTES", u32(opBINBYTES, 0xfffffff0), invalidPickle},
		{"huge BINUNICODE8", u64(opBINUNICODE8, 1<<63), invalidPickle},
		{"huge BINBYTES8", u64(opBINBYTES8, math.MaxUint64), invalidPickle},
		{"huge FRAME", u64(opFRAME, 1<<40), invalidPickle},
		{"huge LONG4", u32(opLONG4, 1<<30), limit},
		{"negative LONG4", u32(opLONG4, 0xffffffff), invalidPickle},
		{"memo miss", []byte("\x80\x02h\x05."), invalidPickle},
		{"long memo miss", []byte("\x80\x02j\x05\x00\x00\x00."), invalidPickle},
		{"BINPUT on empty stack", []byte("\x80\x02q\x00."), invalidPickle},
		{"SETITEM underflow", []byte("\x80\x02}s."), invalidPickle},
		{"SETITEM on a list", []byte("\x80\x02]K\x01K\x02s."), invalidPickle},
		{"APPEND on a dict", []byte("\x80\x02}K\x01a."), invalidPickle},
		{"SETITEMS odd", []byte("\x80\x02}(K\x01u."), invalidPickle},
		{"SETITEMS no mark", []byte("\x80\x02}K\x01K\x02u."), invalidPickle},
		{"pop across mark", []byte("\x80\x02}(s."), invalidPickle},
		{"TUPLE2 across mark", []byte("\x80\x02K\x01(K\x02\x86."), invalidPickle},
		{"trailing bytes", []byte("\x80\x02}.}"), invalidPickle},
		{"two values", []byte("\x80\x02}}."), invalidPickle},
		{"open mark", []byte("\x80\x02(}."), invalidPickle},
		{"protocol 6", []byte("\x80\x06}."), invalidPickle},
		{"not an opcode", []byte("\x80\x02\xff."), invalidPickle},
		{"invalid UTF-8", []byte("\x80\x02X\x01\x00\x00\x00\xff."), invalidPickle},
		{"GLOBAL without newline", []byte("\x80\x02ctorch"), invalidPickle},
		{"GLOBAL too long", append([]byte("\x80\x02c"), strings.Repeat("a", 5000)+"\nb\n."...), invalidPickle},
		{"STACK_GLOBAL of ints", []byte("\x80\x04K\x01K\x02\x93."), invalidPickle},
		{"REDUCE on a string", []byte("\x80\x02X\x01\x00\x00\x00a)R."), invalidPickle},
		{"REDUCE with a list", []byte("\x80\x02ccollections\nOrderedDict\n]R."), invalidPickle},
		{"OrderedDict with arguments", []byte("\x80\x02ccollections\nOrderedDict\n]\x85R."), unsupportedValue},
		{"REDUCE on a dtype", []byte("\x80\x02ctorch\nfloat32\n)R."), invalidPickle},
		{"BUILD on a dict", []byte("\x80\x02}}b."), unsupportedValue},
		{"BUILD with a list state", []byte("\x80\x02ccollections\nOrderedDict\n)R]b."), unsupportedValue},
		{"tuple dict key", []byte("\x80\x02})K\x01s."), unsupportedValue},
		{"float dict key", append(newPK().op(opEMPTY_DICT).float(1).int(1).b, opSETITEM, opSTOP), unsupportedValue},
		{"persistent id not a tuple", []byte("\x80\x02K\x01Q."), invalidPickle},
		{"persistent id of 4", persid(func(p *pk) {
			p.op(opMARK).str("storage").global("torch", "FloatStorage").str("0").str("cpu").op(opTUPLE)
		}), invalidPickle},
		{"persistent id not storage", persid(func(p *pk) {
			p.op(opMARK).str("module").global("torch", "FloatStorage").str("0").str("cpu").int(1).op(opTUPLE)
		}), invalidPickle},
		{"persistent id with a dtype as type", persid(func(p *pk) {
			p.op(opMARK).str("storage").global("torch", "float32").str("0").str("cpu").int(1).op(opTUPLE)
		}), invalidPickle},
		{"storage key with a slash", persid(func(p *pk) {
			p.op(opMARK).str("storage").global("torch", "FloatStorage").str("../0").str("cpu").int(1).op(opTUPLE)
		}), invalidPickle},
		{"storage key dot-dot", persid(func(p *pk) {
			p.op(opMARK).str("storage").global("torch", "FloatStorage").str("..").str("cpu").int(1).op(opTUPLE)
		}), invalidPickle},
		{"negative numel", persid(func(p *pk) {
			p.op(opMARK).str("storage").global("torch", "FloatStorage").str("0").str("cpu").int(-1).op(opTUPLE)
		}), invalidPickle},
		{"location not a string", persid(func(p *pk) {
			p.op(opMARK).str("storage").global("torch", "FloatStorage").str("0").int(0).int(1).op(opTUPLE)
		}), invalidPickle},
		{"rebuild with 3 arguments", tensorArgs(func(p *pk) { p.op(opMARK).int(1).int(2).int(3).op(opTUPLE) }), invalidPickle},
		{"rebuild of an int", tensorArgs(func(p *pk) {
			p.op(opMARK).int(1).int(0).ints([]int64{1}).ints([]int64{1}).op(opNEWFALSE).orderedDict().op(opTUPLE)
		}), invalidPickle},
		{"size and stride lengths", tensorArgs(func(p *pk) {
			p.op(opMARK).op(opMARK).str("storage").global("torch", "FloatStorage").str("0").str("cpu").int(2).op(opTUPLE, opBINPERSID)
			p.int(0).ints([]int64{1, 2}).ints([]int64{1}).op(opNEWFALSE).orderedDict().op(opTUPLE)
		}), invalidPickle},
		{"size of floats", tensorArgs(func(p *pk) {
			p.op(opMARK).op(opMARK).str("storage").global("torch", "FloatStorage").str("0").str("cpu").int(2).op(opTUPLE, opBINPERSID)
			p.int(0).op(opMARK).float(2).op(opTUPLE).ints([]int64{1}).op(opNEWFALSE).orderedDict().op(opTUPLE)
		}), invalidPickle},
		{"v3 without a dtype", func() []byte {
			p := newPK().op(opEMPTY_DICT).str("t").global("torch._utils", "_rebuild_tensor_v3")
			p.op(opMARK).op(opMARK).str("storage").global("torch.storage", "UntypedStorage").str("0").str("cpu").int(8).op(opTUPLE, opBINPERSID)
			p.int(0).ints([]int64{2}).ints([]int64{1}).op(opNEWFALSE).orderedDict().str("float32").op(opTUPLE)
			return p.op(opREDUCE, opSETITEM).bytes()
		}(), invalidPickle},
	} {
		_, _, err := unpickle(c.data, defaultLimits)
		var e *Error
		if !c.kind.Matches(err) || !errors.As(err, &e) {
			t.Errorf("%s: got %v, want %s", c.name, err, c.kind)
		}
	}
}

func TestUnpickleStorageReferencedTwoWays(t *testing.T) {
	data := stateDict(
		ts{name: "a", storage: "FloatStorage", key: "0", numel: 4, shape: []int64{4}, stride: []int64{1}},
		ts{name: "b", storage: "FloatStorage", key: "0", numel: 8, shape: []int64{4}, stride: []int64{1}},
	)
	if _, _, err := unpickle(data, defaultLimits); !storageSize.Matches(err) {
		t.Fatalf("got %v", err)
	}
	data = stateDict(
		ts{name: "a", storage: "FloatStorage", key: "0", numel: 4, shape: []int64{4}, stride: []int64{1}},
		ts{name: "b", storage: "HalfStorage", key: "0", numel: 4, shape: []int64{4}, stride: []int64{1}},
	)
	if _, _, err := unpickle(data, defaultLimits); !storageSize.Matches(err) {
		t.Fatalf("got %v", err)
	}
}

func TestUnpickleLimits(t *testing.T) {
	small := limits{objects: 100, stack: 50, memo: 10, dims: 4, intBytes: 16, line: 64}
	repeat := func(prefix string, unit string, n int, suffix string) []byte {
		return []byte(prefix + strings.Repeat(unit, n) + suffix)
	}
	for name, data := range map[string][]byte{
		"objects":    repeat("\x80\x02]", "}a", 200, "."),
		"stack":      repeat("\x80\x02}q\x00", "h\x00", 60, "."),
		"marks":      repeat("\x80\x02", "(", 60, "."),
		"memo":       repeat("\x80\x02}", "\x94", 20, "."),
		"long memo":  []byte("\x80\x02}r\x00\x00\x00\x01r\x01\x00\x00\x01r\x02\x00\x00\x01r\x03\x00\x00\x01r\x04\x00\x00\x01r\x05\x00\x00\x01r\x06\x00\x00\x01r\x07\x00\x00\x01r\x08\x00\x00\x01r\x09\x00\x00\x01r\x0a\x00\x00\x01."),
		"dims":       stateDict(ts{name: "t", storage: "FloatStorage", key: "0", numel: 1, shape: []int64{1, 1, 1, 1, 1}, stride: []int64{1, 1, 1, 1, 1}}),
		"int length": append([]byte("\x80\x02\x8a\x20"), make([]byte, 33)...),
	} {
		_, _, err := unpickle(data, small)
		if !limit.Matches(err) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	// Appending the same list many times counts every insertion.
	p := newPK().op(opEMPTY_LIST).put(0)
	for range 20 {
		p.op(opMARK)
		for range 10 {
			p.get(0)
		}
		p.op(opAPPENDS)
	}
	if _, _, err := unpickle(p.bytes(), small); !limit.Matches(err) {
		t.Errorf("APPENDS: got %v", err)
	}
}

// TestUnpickleProtocol4 reads the opcodes of newer protocols that some
// tools write: FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE, BINUNICODE8.
func TestUnpickleProtocol4(t *testing.T) {
	p := (&pk{}).op(opPROTO, 4, opFRAME, 0, 0, 0, 0, 0, 0, 0, 0)
	p.op(opSHORT_BINUNICODE, 11).op([]byte("collections")...).op(opMEMOIZE)
	p.op(opSHORT_BINUNICODE, 11).op([]byte("OrderedDict")...).op(opMEMOIZE)
	p.op(opSTACK_GLOBAL, opMEMOIZE, opEMPTY_TUPLE, opREDUCE, opMEMOIZE)
	p.op(opBINUNICODE8, 1, 0, 0, 0, 0, 0, 0, 0, 'a').int(-5).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'b').op(opLONG1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'c').op(opLONG1, 2, 0xff, 0xff).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'd').op(opLONG1, 0).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'e').op(opNONE).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'f').op(opNEWTRUE).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'g').op(opMARK).float(1.5).float(-2).op(opLIST).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'h').op(opMARK).int(1).str("x").op(opDICT).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'i').op(opLONG1, 8, 0, 0, 0, 0, 0, 0, 0, 0x80).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'j').global("torch", "bfloat16").op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'k').op(opEMPTY_LIST).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'l').op(opEMPTY_TUPLE).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'm').op(opEMPTY_DICT).op(opSETITEM)
	p.op(opSHORT_BINUNICODE, 1, 'a').int(7).op(opSETITEM) // a repeated key replaces the value in place
	root, _, err := unpickle(p.bytes(), defaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	es, err := flatten(root, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a=7", "b=18446744073709551616", "c=-1", "d=0", "e=None", "f=True", "g.0=1.5", "g.1=-2.0",
		"h.1=x", "i=-9223372036854775808", "j=torch.bfloat16", "k=[]", "l=()", "m={}"}
	var got []string
	for _, e := range es {
		got = append(got, e.name+"="+e.text)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestFlattenRefusals(t *testing.T) {
	unp := func(b []byte) any {
		v, _, err := unpickle(b, defaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// A list that contains itself.
	cyc := newPK().op(opEMPTY_DICT).str("l").op(opEMPTY_LIST).put(0).get(0).op(opAPPEND, opSETITEM).bytes()
	if _, err := flatten(unp(cyc), 1000); !unsupportedValue.Matches(err) {
		t.Errorf("cycle: got %v", err)
	}
	// Lists nested deeper than maxNesting.
	p := newPK().op(opEMPTY_DICT).str("deep")
	for range maxNesting + 10 {
		p.op(opEMPTY_LIST)
	}
	p.int(1).op(opAPPEND)
	for range maxNesting + 9 {
		p.op(opAPPEND)
	}
	if _, err := flatten(unp(p.op(opSETITEM).bytes()), 1<<20); !limit.Matches(err) {
		t.Errorf("nesting: got %v", err)
	}
	// Shared lists: 2^60 paths through 60 lists.
	p = newPK().op(opEMPTY_DICT).str("x").op(opEMPTY_LIST).int(1).op(opAPPEND).put(0)
	for range 60 {
		p.op(opPOP, opEMPTY_LIST).get(0).op(opAPPEND).get(0).op(opAPPEND).put(0)
	}
	if _, err := flatten(unp(p.op(opSETITEM).bytes()), 10000); !limit.Matches(err) {
		t.Errorf("sharing: got %v", err)
	}
	// A long key under a long key: a name over maxNameLen.
	long := strings.Repeat("k", 3000)
	p = newPK().op(opEMPTY_DICT).str(long).op(opEMPTY_DICT).str(long).int(1).op(opSETITEM, opSETITEM)
	if _, err := flatten(unp(p.bytes()), 1<<20); !limit.Matches(err) {
		t.Errorf("long name: %v", err)
	}
	// One dict with a long key, listed 30000 times (2 bytes of pickle
	// each): 90 MB of names from 60 kB of input.
	p = newPK().op(opEMPTY_DICT).str("x").op(opEMPTY_LIST).op(opEMPTY_DICT).str(long).int(1).op(opSETITEM).put(0).op(opAPPEND, opMARK)
	for range 30000 {
		p.get(0)
	}
	if _, err := flatten(unp(p.op(opAPPENDS, opSETITEM).bytes()), 1<<20); !limit.Matches(err) {
		t.Errorf("name bytes: %v", err)
	}
	for name, b := range map[string][]byte{
		"top-level list":   newPK().op(opEMPTY_LIST).bytes(),
		"top-level tensor": newPK().tensor(ts{storage: "FloatStorage", key: "0", numel: 1, shape: []int64{}, stride: []int64{}}).bytes(),
		"bytes value":      newPK().op(opEMPTY_DICT).str("b").op(opSHORT_BINBYTES, 1, 'x', opSETITEM).bytes(),
		"class value":      newPK().op(opEMPTY_DICT).str("c").global("collections", "OrderedDict").op(opSETITEM).bytes(),
		"storage value": newPK().op(opEMPTY_DICT).str("s").op(opMARK).str("storage").global("torch", "FloatStorage").
			str("0").str("cpu").int(1).op(opTUPLE, opBINPERSID, opSETITEM).bytes(),
		"empty name": newPK().op(opEMPTY_DICT).str("").tensor(ts{storage: "FloatStorage", key: "0", numel: 1, shape: []int64{}, stride: []int64{}}).op(opSETITEM).bytes(),
	} {
		if _, err := flatten(unp(b), 1000); !unsupportedValue.Matches(err) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{
		3e-4: "0.0003", 1e-5: "1e-05", 1e16: "1e+16", 123456: "123456.0", 0.1: "0.1", 1.5e300: "1.5e+300",
		1e15: "1000000000000000.0", 9999999999999998: "9999999999999998.0", 1e-4: "0.0001", 2.5: "2.5",
		-7: "-7.0", 5e-324: "5e-324", math.MaxFloat64: "1.7976931348623157e+308", 0.00012345: "0.00012345",
		0: "0.0", math.Inf(1): "inf", math.Inf(-1): "-inf",
	} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%g) = %q, want %q", f, got, want)
		}
	}
	if got := pyFloat(math.Copysign(0, -1)); got != "-0.0" {
		t.Errorf("-0: %q", got)
	}
	if got := pyFloat(math.NaN()); got != "nan" {
		t.Errorf("NaN: %q", got)
	}
}
