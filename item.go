package ckpt

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Action is how the loader produces a tensor from its stored bytes.
type Action uint8

const (
	// ActionView is the stored bytes as they are: a zero-copy view of the
	// file's mapping when the load maps files.
	ActionView Action = iota
	// ActionRead is the stored bytes copied into owned memory (the pread
	// strategy, a part that is not contiguous, a caller's buffer).
	ActionRead
	// ActionConvert is a dtype conversion into owned memory.
	ActionConvert
	// ActionDequantize is a scaled low-precision weight dequantized into
	// owned memory.
	ActionDequantize
	// ActionQuantized is a scaled low-precision weight kept narrow, its
	// scales attached.
	ActionQuantized
)

// String returns "view", "read", "convert", "dequantize" or "quantized",
// as plans spell the action.
func (a Action) String() string {
	names := [...]string{"view", "read", "convert", "dequantize", "quantized"}
	if int(a) < len(names) {
		return names[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Item is the loader's decision for one logical tensor, as a typed value:
// what it is, what it loads as, how, and which stored bytes it reads. Load,
// LoadTensor and Plan work from these decisions, and so do the executors'
// uploads and anything else that consumes a Model: an Item says everything
// they need, so that none of them re-derives a decision from names or
// strings. Items are made by Model.Items; they belong to the Model and read
// through its files until it is closed.
type Item struct {
	// Key is the tensor's name as Names and Weights.All spell it: "NAME",
	// or "COMPONENT/NAME" in a pipeline. Component and Name are its parts.
	Key, Component, Name string
	// Stored is the stored dtype (a quantized weight's element type), and
	// DType the dtype it loads as.
	Stored, DType dtype.DType
	// Shape is the loaded shape: this rank's part of a split tensor, a
	// quantized weight's logical shape.
	Shape []int64
	// Action says how the tensor is produced.
	Action Action
	// Decision is the policy's decision and the rule that made it.
	Decision Decision
	// Bytes is the size of the result: the output of a conversion or
	// dequantization, a quantized weight's data without its scales.
	Bytes int64
	// Split is the part of the stored tensor this rank loads (WithRank),
	// nil for a tensor loaded whole.
	Split *SliceInfo
	// Quant is the scaled low-precision layout of a dequantized or
	// quantized weight, describing exactly the bytes Data and Scales read:
	// the whole weight, or the layout of this rank's part (shapes of the
	// part). It is nil for other tensors, and for a dequantized part that
	// starts inside a scale block, whose bytes do not form a weight of
	// their own (Load dequantizes it on the host; see Produce).
	Quant *quant.Weight
	// Data is what the item reads of its stored tensor (a quantized
	// weight's data tensor), and Scales what it reads of each scale tensor
	// of a quantized weight, in Quant.Scales' order.
	Data   Part
	Scales []Part

	m *Model
	c *modelComponent
	e *entry
}

// Part is the bytes one Item reads of one stored tensor: the whole tensor,
// or this rank's part of it, which may be several ranges (a split of a
// dimension after the first). Its bytes are read as one compact run of
// Size bytes, in row-major order of the part.
type Part struct {
	// Tensor is the stored tensor's name; DType its dtype.
	Tensor string
	DType  dtype.DType
	// Shape is the shape of the part's bytes.
	Shape []int64
	// File and Range are where the bytes are: Range's offsets are absolute
	// in File (a path of the model's file system). A PyTorch view that is
	// not contiguous, or of a big-endian archive, is gathered or
	// byte-swapped as it is read from its storage, which starts at
	// Range.Offset: read its bytes with ReadAt. A view that is not
	// contiguous is read from its file once, by the Part's first ReadAt,
	// into memory that serves every piece (the storage the Part's range
	// spans, or its own bytes: torch.Tensor.GatherBytes) until all of the
	// Part's bytes were read.
	File  string
	Range safetensors.ByteRange
	// check says whether ReadAt verifies the bytes against the checksum
	// the file names, as the policy's Verify decides (see ReadAt).
	check checkMode

	st  storedTensor
	sel strided
	m   *Model
	ck  *tensorCheck // the check ReadAt adds to (checkRead, checkRest), or reads (checkRecord)
}

// Size returns the part's bytes.
func (p *Part) Size() int64 { return p.sel.total() }

// ReadAt reads the compact bytes [off, off+len(b)) of the part through the
// model's own file system (a mapping, pread, any fs.FS, ranged requests of
// a remote source), as io.ReaderAt does.
//
// It verifies the bytes as they pass, as the policy's Verify decides: the reads
// may come in any order and from several goroutines, and the ReadAt that
// completes the part's bytes (checkRead), or, with checkRest, also reads
// the rest of the stored tensor, returns the comparison with the file's
// checksum: a *safetensors.ChecksumError (ErrChecksum) naming the file,
// the tensor and its bytes when they differ. A PyTorch view verified by
// its storage record (checkRecord) reads and verifies the whole record in
// its Part's first ReadAt that reads bytes, before that returns any, once
// per Part. The bytes read before are
// unproven until then: a consumer uses none of a part's bytes unless every
// ReadAt of the part returned nil, and a consumer that reads only some of
// a part's bytes gets them unverified. A part whose reading the policy
// refuses (checkRefused, checkDamaged) fails every ReadAt with ErrChecksum;
// an empty ReadAt (b nil, off 0) reads nothing and returns that refusal, or
// nil, so that a consumer can ask before it allocates anything. Reading the
// part again, once a reading of it is complete, verifies it again. The
// reads of one consumer may overlap in time; two consumers that read the
// same bytes at the same time must each use a Part of their own (the
// Items of two Model.Items calls, or of two Model.Contents): one Part's
// check counts the bytes once, so the second reader's ReadAt of bytes the
// first is reading returns before they are proven.
func (p *Part) ReadAt(b []byte, off int64) (int, error) {
	if p.st == nil {
		return 0, &Error{Kind: ErrRead, Tensor: p.Tensor, Msg: "a Part not made by Model.Items"}
	}
	if off < 0 {
		return 0, &Error{Kind: ErrRead, Tensor: p.Tensor, Msg: fmt.Sprintf("negative offset %d", off)}
	}
	if p.check.refused() {
		return 0, p.m.refusal(p.st, p.check)
	}
	size := p.Size()
	switch {
	case p.check == checkRecord:
		if len(b) > 0 && off < size {
			if err := p.ck.readWhole(); err != nil {
				return 0, err
			}
		}
	case size == 0 && p.ck != nil:
		// No bytes to read: an empty part of an empty tensor is complete
		// now, and checked now.
		if err := p.ck.of.VerifyChecksum(0); err != nil { // the CRC of no bytes
			return 0, err
		}
	}
	if off >= size {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := min(int64(len(b)), size-off)
	err := p.sel.segments(off, off+n, func(src, pos, cnt int64) error {
		if h := p.m.cfg.onRead; h != nil {
			h(p.st, src, cnt)
		}
		dst := b[pos-off : pos-off+cnt]
		_, err := p.st.ReadAt(dst, src)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err == nil && p.ck != nil && p.check != checkRecord {
			err = p.ck.add(src, dst)
		}
		return err
	})
	if err == nil && p.ck != nil && p.check == checkRest && p.ck.startRest(size) {
		err = p.readRest()
	}
	if err != nil {
		return 0, err
	}
	if n < int64(len(b)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// readRest reads the rest of the part's stored tensor to verify it
// (checkRest), once the part's own bytes were read: the ranges the plan
// counts (restRanges: the whole tensor again for a strided part, read in
// large pieces rather than a request per gap).
func (p *Part) readRest() error {
	ranges := restRanges(p.sel, p.ck.size)
	var most int64
	for _, r := range ranges {
		most = max(most, r[1]-r[0])
	}
	if h := p.m.cfg.onRead; h != nil {
		for _, r := range ranges {
			h(p.st, r[0], r[1]-r[0])
		}
	}
	return p.ck.readRanges(context.Background(), ranges, make([]byte, min(most, 1<<20)))
}

// newPart returns the Part of the selection sel of st's bytes, with its
// check as the policy decides (shape is the part's, kept as given).
func (m *Model) newPart(st storedTensor, shape []int64, sel strided) Part {
	st = gathered(st, sel) // read once for the part's pieces (torchGather)
	p := Part{Tensor: st.Name(), DType: st.DType(), Shape: shape, File: filePath(st),
		Range: sel.byteRange(st.Offset()), check: m.checkOf(st, sel), st: st, sel: sel, m: m}
	if p.check.verified() {
		p.ck = newTensorCheck(st, p.check)
	}
	return p
}

// Items returns the loader's decision for every logical tensor, in load
// order (Names' order).
func (m *Model) Items() ([]*Item, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	var out []*Item
	for _, c := range m.comps {
		for _, e := range c.entries {
			it, err := m.item(c, e)
			if err != nil {
				return nil, err
			}
			out = append(out, it)
		}
	}
	return out, nil
}

// item makes e's Item.
func (m *Model) item(c *modelComponent, e *entry) (*Item, error) {
	it := new(Item)
	return it, m.fillItem(it, c, e, true)
}

// fillItem makes *it e's Item. Without own, the Item is only read by the
// plan, never handed out: it shares e's shapes and its Parts have none.
func (m *Model) fillItem(it *Item, c *modelComponent, e *entry, own bool) error {
	clone := func(s []int64) []int64 {
		if own {
			return slices.Clone(s)
		}
		return s
	}
	*it = Item{Key: m.qualify(c.name, e.name), Component: c.name, Name: e.name, Stored: e.stored, DType: e.out,
		Shape: clone(e.shape), Action: e.act, Decision: e.dec, Bytes: e.outBytes, Scales: it.Scales[:0], m: m, c: c, e: e}
	sliced := e.sl != nil && !e.sl.whole
	if e.sl.info != nil {
		info := *e.sl.info
		info.Shape = clone(info.Shape)
		it.Split = &info
	}
	st, scales, err := c.stored(e)
	if err != nil {
		return inComponent(err, c.name)
	}
	part := func(st storedTensor, shape []int64, sel strided, whole bool) Part {
		if whole {
			sel = strided{n: st.ByteLen(), count: 1}.norm()
			if own {
				shape = st.Shape()
			}
		}
		if !own {
			shape = nil
		}
		return m.newPart(st, clone(shape), sel)
	}
	if e.q == nil {
		var sel strided
		if sliced {
			sel = e.sl.data
		}
		it.Data = part(st, e.shape, sel, !sliced)
		return nil
	}
	q := e.q
	if sliced {
		q = e.sl.q.keep
	}
	if q != nil {
		cp := *q
		cp.Shape = clone(q.Shape)
		cp.Data.Shape = clone(q.Data.Shape)
		cp.Scales = slices.Clone(q.Scales)
		it.Quant = &cp
	}
	var dataShape []int64
	if q != nil {
		dataShape = q.Data.Shape
	}
	var sel strided
	if sliced {
		sel = e.sl.data
		if dataShape == nil {
			dataShape = []int64{sel.total()} // the part's bytes, with the rows before it a scale block covers left out
		}
	}
	it.Data = part(st, dataShape, sel, !sliced)
	for i, s := range e.q.Scales {
		shape := s.Shape
		if sliced {
			sel, shape = e.sl.q.scales[i].sel, e.sl.q.scales[i].shape
		}
		it.Scales = append(it.Scales, part(scales[i], shape, sel, !sliced))
	}
	return nil
}

// Produce loads the item on the host, as Load would, into dst, which must
// be exactly Bytes long: the converted, dequantized or copied bytes (for a
// weight kept quantized, its data; its scales are attached to the
// returned Tensor). It is how a consumer that cannot produce an item on its
// own device (a dequantized part that starts inside a scale block) gets the
// loader's bytes. The stored bytes are verified as Load verifies them: a
// damaged tensor is ErrChecksum.
func (it *Item) Produce(ctx context.Context, dst []byte) (*Tensor, error) {
	if it.m == nil {
		return nil, &Error{Kind: ErrRead, Tensor: it.Key, Msg: "an Item not made by Model.Items"}
	}
	return it.m.loadEntry(ctx, it.c, it.e, dst)
}

// plan renders the item as the plan lists it, its shape copied from d;
// ranges lists the byte ranges it reads (the plan does with a rank
// option).
func (it *Item) plan(ranges bool, d *dims) TensorPlan {
	e := it.e
	tp := TensorPlan{Name: it.Name, Stored: it.Stored.String(), Shape: d.clone(it.Shape), DType: it.DType.String(),
		Action: it.Action.String(), Rule: it.Decision.Rule, Bytes: it.Bytes, Split: it.Split,
		StoredBytes: e.storedBytes(), ReadBytes: e.inBytes}
	if e.q != nil {
		tp.Stored = e.q.Elem.String() + " (" + e.q.Layout.String() + ")"
		for _, s := range e.q.Scales {
			tp.Scales = append(tp.Scales, s.Name)
		}
	}
	for i := -1; i < len(it.Scales); i++ {
		p := it.part(i)
		if ranges {
			tp.Ranges = append(tp.Ranges, TensorRead{Tensor: p.Tensor, File: p.File, ByteRange: p.Range})
		}
		tp.VerifyReadBytes += p.verifyReadBytes()
	}
	tp.Verify = it.check().string()
	if it.e.mapped > 0 && it.m.onRead(it.check()) {
		tp.Verify = "checksum, when read"
	}
	return tp
}

// verifyReadBytes is what reading the part reads only to verify it: the
// rest of its tensor (checkRest), the whole storage record of a PyTorch
// view (checkRecord).
func (p *Part) verifyReadBytes() int64 {
	switch p.check {
	case checkRest:
		return restBytes(p.sel, p.st.ByteLen())
	case checkRecord:
		cl, _, _ := claimOf(p.st)
		return cl.size
	}
	return 0
}

// part returns its Data for i = -1, else Scales[i].
func (it *Item) part(i int) *Part {
	if i < 0 {
		return &it.Data
	}
	return &it.Scales[i]
}

// check says how the item's stored bytes are verified: the check of its
// least verified Part (its data, or a scale of a quantized weight).
func (it *Item) check() checkMode {
	check := it.Data.check
	for _, p := range it.Scales {
		if p.check.weaker(check) {
			check = p.check
		}
	}
	return check
}

// add counts a tensor of the plan (its item and its TensorPlan).
func (v *VerifyPlan) add(it *Item, tp TensorPlan) {
	check := it.check()
	var bytes int64
	for i := -1; i < len(it.Scales); i++ {
		bytes += it.part(i).st.ByteLen()
	}
	switch {
	case check.verified():
		v.Tensors++
		v.Bytes += bytes
		v.ReadBytes += tp.VerifyReadBytes
		// Views: read by the load's pass (verify.go), or verified as
		// their reader reads them (onread.go).
		var later int64
		for i := -1; i < len(it.Scales) && it.e.mapped > 0; i++ {
			if p := it.part(i); it.m.onRead(p.check) {
				later += p.Size()
			}
		}
		v.PassBytes += it.e.mapped - later
		v.OnReadBytes += later
	case check.refused():
		v.Refused++
	default:
		v.Unverified++
	}
	if !check.verified() {
		if v.Why == nil {
			v.Why = map[string]int{}
		}
		v.Why[check.string()]++
	}
}
