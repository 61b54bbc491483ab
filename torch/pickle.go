package torch

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ckpt-go/ckpt/dtype"
)

// The pickle opcodes, by byte. Only those with a case in (*unpickler).run
// are implemented; the others are named in ErrUnsupported errors ("unsupported opcode").
const (
	opMARK             = '('
	opSTOP             = '.'
	opPOP              = '0'
	opPOP_MARK         = '1'
	opDUP              = '2'
	opBININT           = 'J'
	opBININT1          = 'K'
	opBININT2          = 'M'
	opNONE             = 'N'
	opBINPERSID        = 'Q'
	opREDUCE           = 'R'
	opBINUNICODE       = 'X'
	opAPPEND           = 'a'
	opBUILD            = 'b'
	opGLOBAL           = 'c'
	opDICT             = 'd'
	opEMPTY_DICT       = '}'
	opAPPENDS          = 'e'
	opBINGET           = 'h'
	opLONG_BINGET      = 'j'
	opLIST             = 'l'
	opEMPTY_LIST       = ']'
	opBINPUT           = 'q'
	opLONG_BINPUT      = 'r'
	opSETITEM          = 's'
	opTUPLE            = 't'
	opEMPTY_TUPLE      = ')'
	opSETITEMS         = 'u'
	opBINFLOAT         = 'G'
	opBINBYTES         = 'B'
	opSHORT_BINBYTES   = 'C'
	opPROTO            = 0x80
	opTUPLE1           = 0x85
	opTUPLE2           = 0x86
	opTUPLE3           = 0x87
	opNEWTRUE          = 0x88
	opNEWFALSE         = 0x89
	opLONG1            = 0x8a
	opLONG4            = 0x8b
	opSHORT_BINUNICODE = 0x8c
	opBINUNICODE8      = 0x8d
	opBINBYTES8        = 0x8e
	opSTACK_GLOBAL     = 0x93
	opMEMOIZE          = 0x94
	opFRAME            = 0x95
)

// opNames names every opcode of pickle protocols 0 to 5, for errors.
var opNames = map[byte]string{
	'(': "MARK", '.': "STOP", '0': "POP", '1': "POP_MARK", '2': "DUP", 'F': "FLOAT",
	'I': "INT", 'J': "BININT", 'K': "BININT1", 'L': "LONG", 'M': "BININT2", 'N': "NONE",
	'P': "PERSID", 'Q': "BINPERSID", 'R': "REDUCE", 'S': "STRING", 'T': "BINSTRING",
	'U': "SHORT_BINSTRING", 'V': "UNICODE", 'X': "BINUNICODE", 'a': "APPEND", 'b': "BUILD",
	'c': "GLOBAL", 'd': "DICT", '}': "EMPTY_DICT", 'e': "APPENDS", 'g': "GET", 'h': "BINGET",
	'i': "INST", 'j': "LONG_BINGET", 'l': "LIST", ']': "EMPTY_LIST", 'o': "OBJ", 'p': "PUT",
	'q': "BINPUT", 'r': "LONG_BINPUT", 's': "SETITEM", 't': "TUPLE", ')': "EMPTY_TUPLE",
	'u': "SETITEMS", 'G': "BINFLOAT", 'B': "BINBYTES", 'C': "SHORT_BINBYTES",
	0x80: "PROTO", 0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x85: "TUPLE1",
	0x86: "TUPLE2", 0x87: "TUPLE3", 0x88: "NEWTRUE", 0x89: "NEWFALSE", 0x8a: "LONG1",
	0x8b: "LONG4", 0x8c: "SHORT_BINUNICODE", 0x8d: "BINUNICODE8", 0x8e: "BINBYTES8",
	0x8f: "EMPTY_SET", 0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX",
	0x93: "STACK_GLOBAL", 0x94: "MEMOIZE", 0x95: "FRAME", 0x96: "BYTEARRAY8",
	0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
}

// MaxPickleSize is the largest data.pkl accepted (64 MiB). The pickle of a
// state dict takes a few hundred bytes per tensor.
const MaxPickleSize = 64 << 20

// limits bound the work and memory of one unpickling, whatever the input.
type limits struct {
	objects  int // values created plus container insertions
	stack    int // values on the stack
	memo     int // memo entries
	dims     int // dimensions of a tensor
	intBytes int // bytes of a LONG1/LONG4 integer
	line     int // bytes of a GLOBAL line
}

var defaultLimits = limits{
	objects:  1 << 23,
	stack:    1 << 20,
	memo:     1 << 23,
	dims:     64,
	intBytes: 256,
	line:     1024,
}

// The values the unpickler builds. Python ints are int64 (or *big.Int when
// they do not fit), floats float64, str string, bool bool, None pyNone.
type (
	pyNone  struct{}
	pyTuple []any
	pyBytes string
	pyList  struct{ items []any }
	// pyDict is a dict or OrderedDict: insertion order kept, a repeated key
	// replacing the value in place, as Python does.
	pyDict struct {
		keys, vals []any
		idx        map[any]int
		ordered    bool
	}
)

// storageRef is a storage named by a persistent id ("storage", type, key,
// location, numel). Every reference to one key is the same *storageRef.
type storageRef struct {
	key      string
	typ      string      // the storage type as spelled: "torch FloatStorage"
	dt       dtype.DType // its element type (U8 for UntypedStorage)
	location string      // "cpu", "cuda:0", ...: ignored, the data is read to memory
	numel    int64       // in elements of dt
}

// tensorObj is the result of _rebuild_tensor_v2/_v3 (or _rebuild_parameter
// of one): a view of a storage. Its fields are checked for type when it is
// built and for meaning (bounds, hooks, metadata) once it has a name.
type tensorObj struct {
	st     *storageRef
	dt     dtype.DType
	offset int64   // in elements of dt
	shape  []int64 // in elements
	stride []int64 // in elements of dt
	// unsupported, when set, says why the tensor cannot be converted
	// (backward hooks, a negated view): reported with its name.
	unsupported string
}

// unpickler is a pickle virtual machine restricted to what torch.save
// writes for a state dict. It imports nothing and calls nothing: the allowed
// globals are interpreted by REDUCE and BINPERSID themselves.
type unpickler struct {
	data    []byte
	pos     int // next byte to read
	opPos   int // offset of the opcode being run
	stack   []any
	marks   []int
	memo    map[uint32]any
	objects int
	lim     limits

	storages map[string]*storageRef
}

func newUnpickler(data []byte, lim limits) *unpickler {
	return &unpickler{data: data, lim: lim, memo: make(map[uint32]any), storages: make(map[string]*storageRef)}
}

// unpickle runs data through a restricted unpickler and returns the object
// it builds, with the storages it references by key.
func unpickle(data []byte, lim limits) (any, map[string]*storageRef, error) {
	u := newUnpickler(data, lim)
	v, err := u.run()
	if err != nil {
		return nil, nil, err
	}
	return v, u.storages, nil
}

func (u *unpickler) errf(kind ErrorKind, format string, args ...any) error {
	name := opNames[u.data[u.opPos]]
	return &Error{Kind: kind, Msg: fmt.Sprintf("offset %d (%s): ", u.opPos, name) + fmt.Sprintf(format, args...)}
}

// count charges n objects against the limit.
func (u *unpickler) count(n int) error {
	u.objects += n
	if u.objects > u.lim.objects {
		return u.errf(ErrUnsupported, "limit: more than %d objects", u.lim.objects)
	}
	return nil
}

func (u *unpickler) push(v any) error {
	if len(u.stack) >= u.lim.stack {
		return u.errf(ErrUnsupported, "limit: stack deeper than %d", u.lim.stack)
	}
	u.stack = append(u.stack, v)
	return nil
}

// pushNew pushes a newly created value, counting it.
func (u *unpickler) pushNew(v any) error {
	if err := u.count(1); err != nil {
		return err
	}
	return u.push(v)
}

func (u *unpickler) pop() (any, error) {
	n := len(u.stack)
	if n == 0 || (len(u.marks) > 0 && u.marks[len(u.marks)-1] == n) {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: stack underflow")
	}
	v := u.stack[n-1]
	u.stack[n-1] = nil
	u.stack = u.stack[:n-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	n := len(u.stack)
	if n == 0 || (len(u.marks) > 0 && u.marks[len(u.marks)-1] == n) {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: stack underflow")
	}
	return u.stack[n-1], nil
}

// popMark returns the values above the last mark (a slice of the stack,
// valid until the next push) and removes them and the mark.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: no MARK on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := u.stack[m:]
	u.stack = u.stack[:m]
	return items, nil
}

// take returns the next n bytes of input.
func (u *unpickler) take(n uint64) ([]byte, error) {
	if n > uint64(len(u.data)-u.pos) {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: %d bytes wanted, %d left: truncated", n, len(u.data)-u.pos)
	}
	b := u.data[u.pos : u.pos+int(n)]
	u.pos += int(n)
	return b, nil
}

func (u *unpickler) uint(n int) (uint64, error) {
	b, err := u.take(uint64(n))
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

// line reads a GLOBAL operand: text up to a newline.
func (u *unpickler) line() (string, error) {
	for i := u.pos; i < len(u.data) && i-u.pos <= u.lim.line; i++ {
		if u.data[i] == '\n' {
			s := u.data[u.pos:i]
			u.pos = i + 1
			if !utf8.Valid(s) {
				return "", u.errf(ErrInvalidFormat, "invalid pickle: global name is not UTF-8")
			}
			return string(s), nil
		}
	}
	return "", u.errf(ErrInvalidFormat, "invalid pickle: global name without a newline in %d bytes", u.lim.line)
}

func (u *unpickler) text(n uint64) error {
	b, err := u.take(n)
	if err != nil {
		return err
	}
	if !utf8.Valid(b) {
		return u.errf(ErrInvalidFormat, "invalid pickle: string is not UTF-8")
	}
	return u.pushNew(string(b))
}

func (u *unpickler) bytes(n uint64) error {
	b, err := u.take(n)
	if err != nil {
		return err
	}
	return u.pushNew(pyBytes(b))
}

// long decodes a little-endian two's complement integer (LONG1, LONG4).
func (u *unpickler) long(n uint64) error {
	if n > uint64(u.lim.intBytes) {
		return u.errf(ErrUnsupported, "limit: integer of %d bytes, more than %d", n, u.lim.intBytes)
	}
	b, err := u.take(n)
	if err != nil {
		return err
	}
	if len(b) <= 8 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		if len(b) > 0 && len(b) < 8 && b[len(b)-1]&0x80 != 0 {
			v |= ^uint64(0) << (8 * len(b)) // sign-extend
		}
		return u.pushNew(int64(v))
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	v := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if v.IsInt64() {
		return u.pushNew(v.Int64())
	}
	return u.pushNew(v)
}

func (u *unpickler) memoPut(idx uint32) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	if _, ok := u.memo[idx]; !ok && len(u.memo) >= u.lim.memo {
		return u.errf(ErrUnsupported, "limit: more than %d memo entries", u.lim.memo)
	}
	u.memo[idx] = v
	return nil
}

func (u *unpickler) memoGet(idx uint32) error {
	v, ok := u.memo[idx]
	if !ok {
		return u.errf(ErrInvalidFormat, "invalid pickle: memo entry %d was never stored", idx)
	}
	return u.push(v)
}

// run executes the pickle up to STOP and returns the value it leaves.
func (u *unpickler) run() (any, error) {
	for {
		if u.pos >= len(u.data) {
			if len(u.data) == 0 {
				return nil, &Error{Kind: ErrInvalidFormat, Msg: "invalid pickle: empty pickle"}
			}
			return nil, &Error{Kind: ErrInvalidFormat, Msg: fmt.Sprintf("invalid pickle: offset %d: truncated: no STOP", u.pos)}
		}
		u.opPos = u.pos
		op := u.data[u.pos]
		u.pos++
		var err error
		switch op {
		case opPROTO:
			var v uint64
			if v, err = u.uint(1); err == nil && v > 5 {
				err = u.errf(ErrInvalidFormat, "invalid pickle: pickle protocol %d (at most 5 exists)", v)
			}
		case opFRAME:
			// Protocol 4 frames only group opcodes; the whole pickle is
			// in memory already. The size must still be plausible.
			var n uint64
			if n, err = u.uint(8); err == nil && n > uint64(len(u.data)-u.pos) {
				err = u.errf(ErrInvalidFormat, "invalid pickle: frame of %d bytes, %d left", n, len(u.data)-u.pos)
			}
		case opGLOBAL:
			var mod, name string
			if mod, err = u.line(); err == nil {
				if name, err = u.line(); err == nil {
					err = u.global(mod, name)
				}
			}
		case opSTACK_GLOBAL:
			err = u.stackGlobal()
		case opBINPUT:
			var i uint64
			if i, err = u.uint(1); err == nil {
				err = u.memoPut(uint32(i))
			}
		case opLONG_BINPUT:
			var i uint64
			if i, err = u.uint(4); err == nil {
				err = u.memoPut(uint32(i))
			}
		case opMEMOIZE:
			err = u.memoPut(uint32(len(u.memo)))
		case opBINGET:
			var i uint64
			if i, err = u.uint(1); err == nil {
				err = u.memoGet(uint32(i))
			}
		case opLONG_BINGET:
			var i uint64
			if i, err = u.uint(4); err == nil {
				err = u.memoGet(uint32(i))
			}
		case opMARK:
			if len(u.marks) >= u.lim.stack {
				err = u.errf(ErrUnsupported, "limit: more than %d marks", u.lim.stack)
			} else {
				u.marks = append(u.marks, len(u.stack))
			}
		case opPOP:
			if len(u.stack) > 0 && (len(u.marks) == 0 || u.marks[len(u.marks)-1] < len(u.stack)) {
				_, err = u.pop()
			} else {
				_, err = u.popMark() // as Python does when the top is a mark
			}
		case opPOP_MARK:
			_, err = u.popMark()
		case opDUP:
			var v any
			if v, err = u.top(); err == nil {
				err = u.push(v)
			}
		case opEMPTY_DICT:
			err = u.pushNew(&pyDict{})
		case opEMPTY_LIST:
			err = u.pushNew(&pyList{})
		case opEMPTY_TUPLE:
			err = u.pushNew(pyTuple{})
		case opTUPLE:
			var items []any
			if items, err = u.popMark(); err == nil {
				err = u.pushNew(pyTuple(clone(items)))
			}
		case opTUPLE1, opTUPLE2, opTUPLE3:
			err = u.tupleN(int(op-opTUPLE1) + 1)
		case opLIST:
			var items []any
			if items, err = u.popMark(); err == nil {
				err = u.pushNew(&pyList{items: clone(items)})
			}
		case opDICT:
			var items []any
			if items, err = u.popMark(); err == nil {
				d := &pyDict{}
				if err = u.setItems(d, clone(items)); err == nil {
					err = u.pushNew(d)
				}
			}
		case opSETITEM:
			err = u.setItem()
		case opSETITEMS:
			err = u.setItemsMark()
		case opAPPEND:
			err = u.appendOne()
		case opAPPENDS:
			err = u.appends()
		case opBININT:
			var v uint64
			if v, err = u.uint(4); err == nil {
				err = u.pushNew(int64(int32(uint32(v))))
			}
		case opBININT1:
			var v uint64
			if v, err = u.uint(1); err == nil {
				err = u.pushNew(int64(v))
			}
		case opBININT2:
			var v uint64
			if v, err = u.uint(2); err == nil {
				err = u.pushNew(int64(v))
			}
		case opLONG1:
			var n uint64
			if n, err = u.uint(1); err == nil {
				err = u.long(n)
			}
		case opLONG4:
			var n uint64
			if n, err = u.uint(4); err == nil {
				if int32(uint32(n)) < 0 {
					err = u.errf(ErrInvalidFormat, "invalid pickle: negative length")
				} else {
					err = u.long(n)
				}
			}
		case opBINFLOAT:
			var b []byte
			if b, err = u.take(8); err == nil {
				err = u.pushNew(math.Float64frombits(binary.BigEndian.Uint64(b)))
			}
		case opBINUNICODE:
			var n uint64
			if n, err = u.uint(4); err == nil {
				err = u.text(n)
			}
		case opSHORT_BINUNICODE:
			var n uint64
			if n, err = u.uint(1); err == nil {
				err = u.text(n)
			}
		case opBINUNICODE8:
			var n uint64
			if n, err = u.uint(8); err == nil {
				err = u.text(n)
			}
		case opBINBYTES:
			var n uint64
			if n, err = u.uint(4); err == nil {
				err = u.bytes(n)
			}
		case opSHORT_BINBYTES:
			var n uint64
			if n, err = u.uint(1); err == nil {
				err = u.bytes(n)
			}
		case opBINBYTES8:
			var n uint64
			if n, err = u.uint(8); err == nil {
				err = u.bytes(n)
			}
		case opNEWTRUE:
			err = u.pushNew(true)
		case opNEWFALSE:
			err = u.pushNew(false)
		case opNONE:
			err = u.pushNew(pyNone{})
		case opREDUCE:
			err = u.reduce()
		case opBUILD:
			err = u.build()
		case opBINPERSID:
			err = u.persistentID()
		case opSTOP:
			return u.stop()
		default:
			err = u.unsupported(op)
		}
		if err != nil {
			return nil, err
		}
	}
}

func (u *unpickler) unsupported(op byte) error {
	name, ok := opNames[op]
	if !ok {
		return &Error{Kind: ErrInvalidFormat, Msg: fmt.Sprintf("invalid pickle: offset %d: byte 0x%02x is not a pickle opcode", u.opPos, op)}
	}
	msg := fmt.Sprintf("offset %d: opcode %s (0x%02x) is not one that torch.save writes for a state dict", u.opPos, name, op)
	if op == 'i' { // INST: name the class it would import and call
		if mod, err := u.line(); err == nil {
			if cls, err := u.line(); err == nil {
				return &Error{Kind: ErrUnsupported, Global: mod + " " + cls, Msg: "unsupported opcode: " + msg}
			}
		}
	}
	return &Error{Kind: ErrUnsupported, Msg: "unsupported opcode: " + msg}
}

func (u *unpickler) stop() (any, error) {
	if len(u.marks) != 0 {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: %d MARKs left open", len(u.marks))
	}
	if len(u.stack) != 1 {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: %d values on the stack, want 1", len(u.stack))
	}
	if u.pos != len(u.data) {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: %d bytes after STOP", len(u.data)-u.pos)
	}
	return u.stack[0], nil
}

func clone(items []any) []any {
	out := make([]any, len(items))
	copy(out, items)
	return out
}

func (u *unpickler) global(mod, name string) error {
	g, err := lookupGlobal(mod, name)
	if err != nil {
		e := err.(*Error)
		e.Msg = fmt.Sprintf("offset %d (%s): %s", u.opPos, opNames[u.data[u.opPos]], e.Msg)
		return e
	}
	return u.pushNew(g)
}

func (u *unpickler) stackGlobal() error {
	nv, err := u.pop()
	if err != nil {
		return err
	}
	mv, err := u.pop()
	if err != nil {
		return err
	}
	name, ok1 := nv.(string)
	mod, ok2 := mv.(string)
	if !ok1 || !ok2 {
		return u.errf(ErrInvalidFormat, "invalid pickle: STACK_GLOBAL operands are %s and %s, not strings", typeName(mv), typeName(nv))
	}
	return u.global(mod, name)
}

func (u *unpickler) tupleN(n int) error {
	if len(u.stack) < n || (len(u.marks) > 0 && u.marks[len(u.marks)-1] > len(u.stack)-n) {
		return u.errf(ErrInvalidFormat, "invalid pickle: stack underflow")
	}
	t := clone(u.stack[len(u.stack)-n:])
	clear(u.stack[len(u.stack)-n:])
	u.stack = u.stack[:len(u.stack)-n]
	return u.pushNew(pyTuple(t))
}

// dictKey returns the Go map key for a Python dict key: str, int, bool
// (equal to 0 and 1, as in Python) and None are accepted.
func dictKey(k any) (any, bool) {
	switch k := k.(type) {
	case string, int64, pyNone:
		return k, true
	case bool:
		if k {
			return int64(1), true
		}
		return int64(0), true
	case *big.Int:
		return "\x00int " + k.String(), true // never equal to an int64 key: those fit
	}
	return nil, false
}

func (u *unpickler) set(d *pyDict, k, v any) error {
	mk, ok := dictKey(k)
	if !ok {
		return u.errf(ErrUnsupported, "unsupported value: dict key of type %s (only str and int keys are supported)", typeName(k))
	}
	if i, ok := d.idx[mk]; ok {
		d.vals[i] = v // Python keeps the first key and its position
		return nil
	}
	if err := u.count(1); err != nil {
		return err
	}
	if d.idx == nil {
		d.idx = make(map[any]int)
	}
	d.idx[mk] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

func (u *unpickler) setItems(d *pyDict, items []any) error {
	if len(items)%2 != 0 {
		return u.errf(ErrInvalidFormat, "invalid pickle: odd number of values (%d) for key-value pairs", len(items))
	}
	for i := 0; i < len(items); i += 2 {
		if err := u.set(d, items[i], items[i+1]); err != nil {
			return err
		}
	}
	return nil
}

func (u *unpickler) dictOnTop() (*pyDict, error) {
	t, err := u.top()
	if err != nil {
		return nil, err
	}
	d, ok := t.(*pyDict)
	if !ok {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: setting items of a %s, not a dict", typeName(t))
	}
	return d, nil
}

func (u *unpickler) setItem() error {
	v, err := u.pop()
	if err != nil {
		return err
	}
	k, err := u.pop()
	if err != nil {
		return err
	}
	d, err := u.dictOnTop()
	if err != nil {
		return err
	}
	return u.set(d, k, v)
}

func (u *unpickler) setItemsMark() error {
	items, err := u.popMark()
	if err != nil {
		return err
	}
	items = clone(items)
	d, err := u.dictOnTop()
	if err != nil {
		return err
	}
	return u.setItems(d, items)
}

func (u *unpickler) listOnTop() (*pyList, error) {
	t, err := u.top()
	if err != nil {
		return nil, err
	}
	l, ok := t.(*pyList)
	if !ok {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: appending to a %s, not a list", typeName(t))
	}
	return l, nil
}

func (u *unpickler) appendOne() error {
	v, err := u.pop()
	if err != nil {
		return err
	}
	l, err := u.listOnTop()
	if err != nil {
		return err
	}
	if err := u.count(1); err != nil {
		return err
	}
	l.items = append(l.items, v)
	return nil
}

func (u *unpickler) appends() error {
	items, err := u.popMark()
	if err != nil {
		return err
	}
	items = clone(items)
	l, err := u.listOnTop()
	if err != nil {
		return err
	}
	if err := u.count(len(items)); err != nil {
		return err
	}
	l.items = append(l.items, items...)
	return nil
}

// persistentID resolves BINPERSID's ("storage", type, key, location, numel).
func (u *unpickler) persistentID() error {
	v, err := u.pop()
	if err != nil {
		return err
	}
	t, ok := v.(pyTuple)
	if !ok || len(t) != 5 {
		return u.errf(ErrInvalidFormat, "invalid pickle: persistent id is a %s, not (\"storage\", type, key, location, numel)", describe(v))
	}
	if s, ok := t[0].(string); !ok || s != "storage" {
		return u.errf(ErrInvalidFormat, "invalid pickle: persistent id of kind %s, not \"storage\"", describe(t[0]))
	}
	g, ok := t[1].(*pyGlobal)
	if !ok || (g.kind != gStorage && g.kind != gUntypedStorage) {
		return u.errf(ErrInvalidFormat, "invalid pickle: persistent id's storage type is a %s, not a storage class", describe(t[1]))
	}
	var key string
	switch k := t[2].(type) {
	case string:
		key = k
	case int64:
		key = strconv.FormatInt(k, 10)
	default:
		return u.errf(ErrInvalidFormat, "invalid pickle: storage key is a %s, not a string", typeName(t[2]))
	}
	if key == "" || len(key) > 256 || !safeKey(key) {
		return u.errf(ErrInvalidFormat, "invalid pickle: storage key %q is not a plain record name", key)
	}
	loc, ok := t[3].(string)
	if !ok {
		return u.errf(ErrInvalidFormat, "invalid pickle: storage location is a %s, not a string", typeName(t[3]))
	}
	numel, ok := t[4].(int64)
	if !ok || numel < 0 {
		return u.errf(ErrInvalidFormat, "invalid pickle: storage %q size is %s, not a non-negative integer", key, describe(t[4]))
	}
	if s, ok := u.storages[key]; ok {
		if s.dt != g.dt || s.numel != numel {
			return u.errf(ErrInvalidFormat, "storage size: storage %q referenced as %d elements of %s and as %d of %s",
				key, s.numel, s.typ, numel, g.spelled)
		}
		return u.push(s)
	}
	s := &storageRef{key: key, typ: g.spelled, dt: g.dt, location: loc, numel: numel}
	u.storages[key] = s
	return u.pushNew(s)
}

// safeKey reports whether a storage key can name a record: no separators,
// no control characters, not "." or "..".
func safeKey(k string) bool {
	if k == "." || k == ".." {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c == 0x7f || c == '/' || c == '\\' {
			return false
		}
	}
	return true
}

func (u *unpickler) reduce() error {
	argv, err := u.pop()
	if err != nil {
		return err
	}
	fv, err := u.pop()
	if err != nil {
		return err
	}
	g, ok := fv.(*pyGlobal)
	if !ok {
		return u.errf(ErrInvalidFormat, "invalid pickle: REDUCE calls a %s, not a global", typeName(fv))
	}
	args, ok := argv.(pyTuple)
	if !ok {
		return u.errf(ErrInvalidFormat, "invalid pickle: REDUCE arguments are a %s, not a tuple", typeName(argv))
	}
	var v any
	switch g.kind {
	case gOrderedDict:
		if len(args) != 0 {
			return u.errf(ErrUnsupported, "unsupported value: OrderedDict called with %d arguments (torch.save writes none)", len(args))
		}
		v = &pyDict{ordered: true}
	case gRebuildV2, gRebuildV3:
		if v, err = u.rebuildTensor(g, args); err != nil {
			return err
		}
	case gRebuildParam, gRebuildParamState:
		if v, err = u.rebuildParameter(g, args); err != nil {
			return err
		}
	default:
		return u.errf(ErrInvalidFormat, "invalid pickle: %s is not callable here", g.spelled)
	}
	return u.pushNew(v)
}

// rebuildTensor interprets _rebuild_tensor_v2(storage, storage_offset,
// size, stride, requires_grad, backward_hooks[, metadata]) and
// _rebuild_tensor_v3(..., backward_hooks, dtype[, metadata]).
func (u *unpickler) rebuildTensor(g *pyGlobal, args pyTuple) (*tensorObj, error) {
	minArgs := 6
	if g.kind == gRebuildV3 {
		minArgs = 7
	}
	if len(args) != minArgs && len(args) != minArgs+1 {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: %s with %d arguments, want %d or %d", g.spelled, len(args), minArgs, minArgs+1)
	}
	st, ok := args[0].(*storageRef)
	if !ok {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: %s storage is a %s, not a persistent storage", g.spelled, typeName(args[0]))
	}
	offset, ok := args[1].(int64)
	if !ok {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: storage offset is a %s, not an int", typeName(args[1]))
	}
	shape, err := u.ints(args[2], "size")
	if err != nil {
		return nil, err
	}
	stride, err := u.ints(args[3], "stride")
	if err != nil {
		return nil, err
	}
	if len(shape) != len(stride) {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: size has %d dimensions, stride %d", len(shape), len(stride))
	}
	if _, ok := args[4].(bool); !ok {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: requires_grad is a %s, not a bool", typeName(args[4]))
	}
	t := &tensorObj{st: st, dt: st.dt, offset: offset, shape: shape, stride: stride}
	switch h := args[5].(type) {
	case *pyDict:
		if len(h.keys) != 0 {
			t.unsupported = "the tensor has backward hooks"
		}
	case pyNone:
	default:
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: backward_hooks is a %s, not a dict", typeName(args[5]))
	}
	if g.kind == gRebuildV3 {
		d, ok := args[6].(*pyGlobal)
		if !ok || d.kind != gDType {
			return nil, u.errf(ErrInvalidFormat, "invalid pickle: dtype is a %s, not a torch dtype", describe(args[6]))
		}
		t.dt = d.dt
	}
	if len(args) == minArgs+1 {
		switch m := args[minArgs].(type) {
		case *pyDict:
			if len(m.keys) != 0 && t.unsupported == "" {
				t.unsupported = fmt.Sprintf("tensor metadata %s (a lazily negated or conjugated view) is not supported", describe(m))
			}
		case pyNone:
		default:
			return nil, u.errf(ErrInvalidFormat, "invalid pickle: tensor metadata is a %s, not a dict", typeName(m))
		}
	}
	return t, nil
}

// rebuildParameter interprets _rebuild_parameter(data, requires_grad,
// backward_hooks) and _rebuild_parameter_with_state(..., state): a
// Parameter is its tensor.
func (u *unpickler) rebuildParameter(g *pyGlobal, args pyTuple) (*tensorObj, error) {
	want := 3
	if g.kind == gRebuildParamState {
		want = 4
	}
	if len(args) != want {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: %s with %d arguments, want %d", g.spelled, len(args), want)
	}
	t, ok := args[0].(*tensorObj)
	if !ok {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: parameter data is a %s, not a tensor", typeName(args[0]))
	}
	if _, ok := args[1].(bool); !ok {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: requires_grad is a %s, not a bool", typeName(args[1]))
	}
	t2 := *t
	switch h := args[2].(type) {
	case *pyDict:
		if len(h.keys) != 0 {
			t2.unsupported = "the parameter has backward hooks"
		}
	case pyNone:
	default:
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: backward_hooks is a %s, not a dict", typeName(args[2]))
	}
	if want == 4 {
		switch s := args[3].(type) {
		case pyNone:
		case *pyDict:
			if len(s.keys) != 0 && t2.unsupported == "" {
				t2.unsupported = fmt.Sprintf("parameter state %s (a Parameter subclass's attributes) is not supported", describe(s))
			}
		default:
			t2.unsupported = fmt.Sprintf("parameter state %s is not supported", describe(s))
		}
	}
	return &t2, nil
}

// ints reads a size or stride: a tuple of ints (of at most lim.dims).
func (u *unpickler) ints(v any, what string) ([]int64, error) {
	t, ok := v.(pyTuple)
	if !ok {
		return nil, u.errf(ErrInvalidFormat, "invalid pickle: %s is a %s, not a tuple", what, typeName(v))
	}
	if len(t) > u.lim.dims {
		return nil, u.errf(ErrUnsupported, "limit: %s has %d dimensions, more than %d", what, len(t), u.lim.dims)
	}
	out := make([]int64, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok {
			return nil, u.errf(ErrInvalidFormat, "invalid pickle: %s[%d] is a %s, not an int", what, i, describe(x))
		}
		out[i] = n
	}
	return out, nil
}

// build interprets BUILD: only on an OrderedDict, whose state is its
// instance attributes (the _metadata of module versions a state_dict
// carries): they are not items and are dropped.
func (u *unpickler) build() error {
	state, err := u.pop()
	if err != nil {
		return err
	}
	obj, err := u.top()
	if err != nil {
		return err
	}
	d, ok := obj.(*pyDict)
	if !ok || !d.ordered {
		return u.errf(ErrUnsupported, "unsupported value: BUILD on a %s (only an OrderedDict's attributes are supported)", typeName(obj))
	}
	switch state.(type) {
	case pyNone, *pyDict:
		return nil
	}
	return u.errf(ErrUnsupported, "unsupported value: OrderedDict state is a %s, not a dict of attributes", typeName(state))
}

// typeName is the Python type name of an unpickled value.
func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case pyNone:
		return "None"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case pyBytes:
		return "bytes"
	case pyTuple:
		return "tuple"
	case *pyList:
		return "list"
	case *pyDict:
		if v.ordered {
			return "OrderedDict"
		}
		return "dict"
	case *pyGlobal:
		return "global " + strconv.Quote(v.spelled)
	case *storageRef:
		return "storage"
	case *tensorObj:
		return "tensor"
	}
	return fmt.Sprintf("%T", v)
}

// describe is a short text for a value in messages: scalars with their
// value, containers with their type and length.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		return strconv.Quote(v)
	case int64, float64, bool, pyNone, *big.Int:
		s, _ := scalarText(v)
		return s
	case pyTuple:
		return fmt.Sprintf("tuple of %d", len(v))
	case *pyList:
		return fmt.Sprintf("list of %d", len(v.items))
	case *pyDict:
		s := typeName(v) + " {"
		for i, k := range v.keys {
			if i == 4 {
				s += ", ..."
				break
			}
			if i > 0 {
				s += ", "
			}
			s += describe(k)
		}
		return s + "}"
	}
	return typeName(v)
}

// scalarText returns a scalar as Python's repr writes it (strings as they
// are): the text non-tensor values get in the metadata.
func scalarText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case int64:
		return strconv.FormatInt(v, 10), true
	case *big.Int:
		return v.String(), true
	case bool:
		if v {
			return "True", true
		}
		return "False", true
	case pyNone:
		return "None", true
	case float64:
		return pyFloat(v), true
	}
	return "", false
}

// pyFloat formats f as Python's repr(float) does: the shortest text that
// reads back to f, positional for exponents -4 to 15 (with ".0" when
// integral), scientific otherwise; "inf", "-inf", "nan".
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp := 0
	if i := strings.LastIndexByte(e, 'e'); i >= 0 {
		exp, _ = strconv.Atoi(e[i+1:])
	}
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if strings.Contains(s, ".") {
			return s
		}
		return s + ".0"
	}
	return e
}
