package ckpt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

// benchChecksummed writes a 4-shard BF16 checkpoint of about mib MiB
// (CKPT_BENCH_VERIFY_MIB overrides) of 4 MiB tensors, with checksums
// (written by package safetensors), once: it is kept in the temporary
// folder for later runs (remove $TMPDIR/ckpt-bench-verify-*).
func benchChecksummed(b *testing.B, mib int) (index string, bytes int64) {
	b.Helper()
	if s := os.Getenv("CKPT_BENCH_VERIFY_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	const elems = 2 << 20 // 4 MiB of BF16
	n := int64(mib) << 20 / (elems * 2)
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("ckpt-bench-verify-%d", mib))
	index = filepath.Join(dir, "model.safetensors.index.json")
	if _, err := os.Stat(index); err == nil {
		return index, n * elems * 2
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	const shards = 4
	weightMap := map[string]string{}
	data := make([]byte, elems*2)
	for s := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		var ts []safetensors.TensorData
		for i := int64(s); i < n; i += shards {
			d := make([]byte, len(data))
			for j := 0; j < len(d); j += 8 {
				binary.LittleEndian.PutUint64(d[j:], (uint64(j)*0x9e3779b97f4a7c15^uint64(i))&0x7e7f7e7f7e7f7e7f) // finite BF16
			}
			tn := fmt.Sprintf("layers.%d.weight", i)
			ts = append(ts, safetensors.TensorData{Name: tn, DType: dtype.BF16, Shape: []int64{elems}, Data: d})
			weightMap[tn] = name
		}
		if err := safetensors.Save(context.Background(), filepath.Join(dir, name), ts, nil); err != nil {
			b.Fatal(err)
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": n * elems * 2}, "weight_map": weightMap})
	if err := os.WriteFile(index, idx, 0o644); err != nil {
		b.Fatal(err)
	}
	return index, n * elems * 2
}

// BenchmarkVerifiedLoad measures what verifying checksums costs a load of
// a 1 GiB checkpoint (4 shards of 4 MiB BF16 tensors, in the page cache),
// verified (VerifyPresent) and unverified (VerifyNever) loads alternating
// in each iteration, so that both see the same machine; the metric
// "verified/unverified" is the ratio of their times, and ns/op and MB/s
// (of stored bytes) are the verified load's.
//
//   - convert: converted to F32 with all cores into a reused arena.
//   - view-touch: opened afresh, loaded as stored (zero-copy views; the
//     verified load's pass faults the pages in), then every byte read by
//     all cores, and closed; also verified as that read reads them
//     (ViewCheckOnRead, Tensor.Chunks).
//
// The -cold variants drop the files from the page cache before each load
// (POSIX_FADV_DONTNEED; Linux), so that the bytes come from the disk. The
// numbers quoted are medians of
//
//	go test -run '^$' -bench BenchmarkVerifiedLoad -benchtime 4x -count 6 .
func BenchmarkVerifiedLoad(b *testing.B) {
	index, n := benchChecksummed(b, 1024)
	for _, cold := range []bool{false, true} {
		name := "convert"
		if cold {
			name += "-cold"
		}
		b.Run(name, func(b *testing.B) { benchConvert(b, index, n, cold, false) })
	}
	// The harness's own floor: both loads unverified.
	b.Run("convert-floor", func(b *testing.B) { benchConvert(b, index, n, false, true) })
	for _, cold := range []bool{false, true} {
		name := "view-touch"
		if cold {
			name += "-cold"
		}
		b.Run(name, func(b *testing.B) { benchViewTouch(b, index, n, cold) })
	}
}

// benchConvert is BenchmarkVerifiedLoad's convert; cold drops the files
// from the page cache before each load. The two models take turns with
// the two arenas, so that where an arena's memory lies does not count for
// one of them; floor makes both unverified, the ratio the harness gives
// for two identical loads.
func benchConvert(b *testing.B, index string, n int64, cold, floor bool) {
	ctx := context.Background()
	var ms [2]*Model
	var arenas [2]*Arena
	verify := []Verify{VerifyPresent, VerifyNever}
	if floor {
		verify[0] = VerifyNever
	}
	for i, v := range verify {
		m, err := Open(index, WithDType(To(dtype.F32)), WithBudget(-1), WithVerify(v))
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		ms[i], arenas[i] = m, NewArena()
		defer arenas[i].Free()
	}
	setup := coldSetup(b, index, cold)
	// The warm loads (it = -1) fault the mappings in and grow the arenas.
	took := testutil.Turns(b, n, 2, setup, func(i, it int) {
		w, err := ms[i].Load(ctx, IntoArena(arenas[(i+max(it, 0)/2)%2]))
		if err != nil {
			b.Fatal(err)
		}
		w.Close()
	})
	testutil.Ratio(b, took, 0, 1, "verified/unverified")
}

// coldSetup returns, for cold, testutil.Turns' setup that drops the
// checkpoint's files from the page cache before each run; nil otherwise.
func coldSetup(b *testing.B, index string, cold bool) func(int) {
	if !cold {
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(index), "*.safetensors"))
	return func(int) {
		for _, f := range files {
			dropCache(b, f)
		}
	}
}

// benchViewTouch is BenchmarkVerifiedLoad's view-touch; cold drops the
// files from the page cache before each load (they are read from the
// disk: by the verified load's pass, or by the touch). A third load, not
// verified, reads every byte once at memory speed with all cores
// (bytes.Count, vectorized) before the touch: the floor of any
// verification by a separate pass over the bytes, which must read them
// once more before the caller does ("verified/read-first" near 1 says the
// pass costs no more than that read). A fourth hands the views out
// unverified (ViewCheckOnRead), and the touch reads them through
// Tensor.Chunks, which verifies them as it goes ("on-read/unverified").
func benchViewTouch(b *testing.B, index string, n int64, cold bool) {
	ctx := context.Background()
	var sink atomic.Uint64
	setup := coldSetup(b, index, cold)
	took := testutil.Turns(b, n, 4, setup, func(i, _ int) {
		opts := []Option{WithBudget(-1), WithVerify([]Verify{VerifyPresent, VerifyNever, VerifyNever, VerifyPresent}[i]), WithReadStrategy("mmap")}
		if i == 3 {
			opts = append(opts, WithViewCheck(ViewCheckOnRead))
		}
		m, err := Open(index, opts...)
		if err != nil {
			b.Fatal(err)
		}
		w, err := m.Load(ctx)
		if err != nil {
			b.Fatal(err)
		}
		switch i {
		case 2:
			sink.Add(eachView(w, func(b []byte) uint64 { return uint64(bytes.Count(b, []byte{0x5a})) }))
			sink.Add(eachView(w, sum8))
		case 3:
			sink.Add(eachTensor(w, func(t *Tensor) uint64 {
				var s uint64
				for c, err := range t.Chunks() {
					if err != nil {
						b.Error(err)
					}
					s += sum8(c)
				}
				return s
			}))
		default:
			sink.Add(eachView(w, sum8))
		}
		w.Close()
		m.Close()
	})
	testutil.Ratio(b, took, 0, 1, "verified/unverified")
	testutil.Ratio(b, took, 0, 2, "verified/read-first")
	testutil.Ratio(b, took, 3, 1, "on-read/unverified")
}

// sum8 reads every byte of b, eight at a time, and returns their sum: the
// touch of view-touch.
func sum8(b []byte) uint64 {
	var s uint64
	for j := 0; j+8 <= len(b); j += 8 {
		s += binary.LittleEndian.Uint64(b[j:])
	}
	return s
}

// eachView runs fn on the bytes of every loaded tensor with all cores and
// returns the sum of its results.
func eachView(w *Weights, fn func([]byte) uint64) uint64 {
	return eachTensor(w, func(t *Tensor) uint64 { return fn(t.Bytes()) })
}

// eachTensor runs fn on every loaded tensor with all cores and returns
// the sum of its results.
func eachTensor(w *Weights, fn func(*Tensor) uint64) uint64 {
	var ts []*Tensor
	for _, t := range w.All() {
		ts = append(ts, t)
	}
	var next atomic.Int64
	var total atomic.Uint64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			var s uint64
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ts)) {
					break
				}
				s += fn(ts[i])
			}
			total.Add(s)
		})
	}
	wg.Wait()
	return total.Load()
}
