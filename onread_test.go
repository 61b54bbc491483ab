package ckpt

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/crc32c"
	"github.com/ckpt-go/ckpt/safetensors"
)

// Under ViewCheckOnRead every stored tensor of verifyFixture that a load
// hands out as a view, damaged by one flipped bit, loads, and is refused
// by the Chunks loop that reads it (its last pair, after every byte), by
// Tensor.Check and by Weights.Check, each naming the file, the tensor and
// its bytes; the tensors the load reads are refused by Load as under
// ViewCheckPass; the plan counts the views as verified when read, and no
// pass.
func TestViewCheckOnRead(t *testing.T) {
	clean := verifyFixture(t)
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	for _, c := range verifyCases(t) {
		if !strings.HasSuffix(c.name, "/mmap") {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			m, err := c.open(t, clean, WithViewCheck(ViewCheckOnRead))
			if err != nil {
				t.Fatal(err)
			}
			p, err := m.Plan()
			if err != nil {
				t.Fatal(err)
			}
			views := viewBytes(t, m)
			if p.Verify.OnReadBytes != views || p.Verify.PassBytes != 0 || p.Verify.Tensors != 4 || views == 0 {
				t.Errorf("plan: %+v, want %d bytes of views verified on read and no pass", p.Verify, views)
			}
			if !strings.Contains(p.String(), "handed out unverified, verified as they are read") || strings.Contains(p.String(), "before the load returns them") {
				t.Errorf("plan does not say that views are verified as they are read:\n%s", p)
			}
			when := 0
			for _, tp := range p.Components[0].Tensors {
				if tp.Verify == "checksum, when read" {
					when++
				}
			}
			if when == 0 {
				t.Errorf("no tensor of the plan is verified when read")
			}
			// Undamaged: every view is pending until a loop over it ends.
			w, err := m.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			viewed := map[string]bool{} // stored names read as views
			for _, tt := range w.All() {
				for _, x := range append([]*Tensor{tt}, tt.Scales...) {
					if x.Location.Owned {
						if x.Pending() {
							t.Errorf("%s: owned, yet not verified", x.Name)
						}
						continue
					}
					viewed[x.Name] = true
					if !x.Pending() {
						t.Errorf("%s: a view is verified before it was read", x.Name)
					}
					got, err := readChunks(x)
					if err != nil || !bytes.Equal(got, x.Bytes()) {
						t.Errorf("%s: Chunks: %d bytes, %v; want its %d bytes", x.Name, len(got), err, len(x.Bytes()))
					}
					if x.Pending() {
						t.Errorf("%s: not verified after a whole loop", x.Name)
					}
				}
			}
			w.Close()
			w, err = m.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range w.All() {
				if tt.Action() == ActionQuantized || tt.Location.Owned {
					continue
				}
				want := make([]float32, tt.NumElements())
				dtype.DecodeFloat32(want, tt.Bytes(), tt.DType)
				if got, err := tt.Float32s(); err != nil || !slices.Equal(got, want) || tt.Pending() {
					t.Errorf("%s: Float32s: %v, pending %v", tt.Name, err, tt.Pending())
				}
			}
			if err := w.Check(ctx); err != nil {
				t.Errorf("Weights.Check: %v", err)
			}
			for _, tt := range w.All() {
				if tt.Pending() {
					t.Errorf("%s: not verified after Weights.Check", tt.Name)
				}
			}
			w.Close()
			m.Close()

			for stored, logical := range verifyStored {
				dir := copyTree(t, clean)
				file, at := flip(t, dir, stored, rng)
				m, err := c.open(t, dir, WithViewCheck(ViewCheckOnRead))
				if err != nil {
					t.Fatal(err)
				}
				w, err := m.Load(ctx)
				if !viewed[stored] {
					checkChecksumErr(t, stored+" damaged: Load", err, file, stored, at)
					m.Close()
					continue
				}
				if err != nil {
					t.Fatalf("%s damaged, a view: Load: %v", stored, err)
				}
				for _, tt := range w.All() {
					for _, x := range append([]*Tensor{tt}, tt.Scales...) {
						got, err := readChunks(x)
						if x.Name != stored {
							if err != nil {
								t.Errorf("%s damaged: Chunks(%s): %v", stored, x.Name, err)
							}
							continue
						}
						if !bytes.Equal(got, x.Bytes()) {
							t.Errorf("%s damaged: Chunks yielded %d bytes before the error, want all %d", stored, len(got), len(x.Bytes()))
						}
						checkChecksumErr(t, stored+" damaged: Chunks", err, file, stored, at)
						if !x.Pending() {
							t.Errorf("%s damaged: verified after a failed loop", stored)
						}
						checkChecksumErr(t, stored+" damaged: Tensor.Check", x.Check(ctx), file, stored, at)
						if x.Action() != ActionQuantized {
							f, err := x.Float32s()
							if f != nil {
								t.Errorf("%s damaged: Float32s returned values", stored)
							}
							checkChecksumErr(t, stored+" damaged: Float32s", err, file, stored, at)
						}
					}
					if tt.Name == logical {
						checkChecksumErr(t, stored+" damaged: Tensor.Check of the weight", tt.Check(ctx), file, stored, at)
					}
				}
				checkChecksumErr(t, stored+" damaged: Weights.Check", w.Check(ctx), file, stored, at)
				w.Close()
				m.Close()
			}
		})
	}
}

// readChunks reads t through Chunks and returns the bytes it yielded and
// its error.
func readChunks(t *Tensor) ([]byte, error) {
	var got []byte
	for b, err := range t.Chunks() {
		if err != nil {
			return got, err
		}
		got = append(got, b...)
	}
	return got, nil
}

// onReadFixture writes a checksummed file of one F32 tensor "w" of 1 MiB
// (several Chunks steps) and one "b" of 64 bytes, and returns its path.
func onReadFixture(t *testing.T) string {
	t.Helper()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7) & 0x3f
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := safetensors.Save(context.Background(), path, []safetensors.TensorData{
		{Name: "w", DType: dtype.F32, Shape: []int64{1 << 18}, Data: data},
		{Name: "b", DType: dtype.F32, Shape: []int64{16}, Data: data[:64]},
	}, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadOnRead opens path with ViewCheckOnRead (mapped) and opts, and loads
// it; both are closed when the test ends.
func loadOnRead(t *testing.T, path string, opts ...Option) (*Model, *Weights) {
	t.Helper()
	m := mustOpen(t, path, append([]Option{WithViewCheck(ViewCheckOnRead), WithReadStrategy("mmap")}, opts...)...)
	w, err := m.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return m, w
}

// Chunks yields a large view in steps of crc32c.Step, each capped at its
// end; a loop that stops early verifies nothing, and a damaged tensor read
// only in part reports nothing; the error comes after the last step.
func TestChunksSteps(t *testing.T) {
	path := onReadFixture(t)
	ctx := context.Background()
	m, w := loadOnRead(t, path)
	tw, _ := w.Tensor("w")
	steps := 0
	var at int
	for b, err := range tw.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != min(crc32c.Step, len(tw.Bytes())-at) || cap(b) != len(b) || &b[0] != &tw.Bytes()[at] {
			t.Fatalf("step %d: %d bytes (cap %d) at the wrong place", steps, len(b), cap(b))
		}
		at += len(b)
		steps++
		if steps == 2 && tw.Pending() {
			break
		}
	}
	if at != 2*crc32c.Step || !tw.Pending() {
		t.Errorf("a loop that stopped after %d bytes: verified %v", at, !tw.Pending())
	}
	if err := tw.Check(ctx); err != nil || tw.Pending() {
		t.Errorf("Check: %v, verified %v", err, !tw.Pending())
	}

	// Damaged in the last step: a loop that stops before it sees nothing
	// wrong; a whole loop yields every step and then the error.
	m.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	flipAt(t, path, fi.Size()-10, 0x10)
	_, w = loadOnRead(t, path)
	tw, _ = w.Tensor("w")
	for b, err := range tw.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < crc32c.Step {
			break
		}
	}
	got, err := readChunks(tw)
	var ce *safetensors.ChecksumError
	if !errors.As(err, &ce) || ce.Tensor != "w" || len(got) != 1<<20 {
		t.Errorf("whole loop: %d bytes, %v; want all 1 MiB, then ErrChecksum naming w", len(got), err)
	}
	if tb, _ := w.Tensor("b"); tb.Check(ctx) != nil || tb.Pending() {
		t.Errorf("b: not verified")
	}
	if err := w.Check(ctx); !errors.Is(err, ErrChecksum) {
		t.Errorf("Weights.Check: %v, want ErrChecksum", err)
	}
}

// A model closed: a pending view's Chunks and Check say so instead of
// reading the unmapped file; an invalid ViewCheck is refused by Open;
// VerifyNever leaves nothing pending.
func TestViewCheckEdges(t *testing.T) {
	path := onReadFixture(t)
	ctx := context.Background()
	m, w := loadOnRead(t, path)
	tw, _ := w.Tensor("w")
	m.Close()
	if _, err := readChunks(tw); !errors.Is(err, ErrClosed) {
		t.Errorf("Chunks after Close: %v, want ErrClosed", err)
	}
	if err := w.Check(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Check after Close: %v, want ErrClosed", err)
	}
	if _, err := Open(path, WithViewCheck(ViewCheck(7))); !errors.Is(err, ErrOption) {
		t.Errorf("ViewCheck(7): %v, want ErrOption", err)
	}
	if ViewCheckPass.String() != "pass" || ViewCheckOnRead.String() != "on read" || ViewCheck(7).String() != "ViewCheck(7)" {
		t.Errorf("String: %s, %s, %s", ViewCheckPass, ViewCheckOnRead, ViewCheck(7))
	}
	m, w = loadOnRead(t, path, WithVerify(VerifyNever))
	for name, tt := range w.All() {
		if tt.Pending() {
			t.Errorf("%s: pending under VerifyNever", name)
		}
	}
	if p, _ := m.Plan(); p.Verify.OnReadBytes != 0 {
		t.Errorf("VerifyNever: plan verifies %d bytes on read", p.Verify.OnReadBytes)
	}
}

// Weights.Check reports its progress as "verify", in bytes of the views
// it reads.
func TestWeightsCheckProgress(t *testing.T) {
	path := onReadFixture(t)
	var last Progress
	var calls int
	_, w := loadOnRead(t, path, WithProgress(func(p Progress) { last = p; calls++ }))
	calls = 0
	if err := w.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := int64(1<<20 + 64); calls == 0 || last.Phase != "verify" || last.Done != want || last.Total != want {
		t.Errorf("last progress %+v after %d calls, want verify %d of %d bytes", last, calls, want, want)
	}
	calls = 0
	if err := w.Check(context.Background()); err != nil || calls != 0 {
		t.Errorf("a second Check: %v, %d progress calls; want nothing to do", err, calls)
	}
}

// Chunks loops over one view in several goroutines, with Weights.Check
// and Tensor.Check beside them (run with -race).
func TestChunksConcurrent(t *testing.T) {
	path := onReadFixture(t)
	ctx := context.Background()
	_, w := loadOnRead(t, path)
	tw, _ := w.Tensor("w")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			got, err := readChunks(tw)
			if err == nil && !bytes.Equal(got, tw.Bytes()) {
				err = errors.New("bytes differ")
			}
			errs <- err
			_ = tw.Stats // the check's pieces record statistics in a Tensor of their own: no race
		})
	}
	wg.Go(func() { errs <- w.Check(ctx) })
	wg.Go(func() { errs <- tw.Check(ctx) })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if tw.Pending() {
		t.Error("not verified")
	}
}
