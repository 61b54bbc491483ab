package convert_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

var (
	registerOnce sync.Once
	toyType      dtype.DType
	registerErr  error
)

// toyDType registers, once per test binary, an 8-bit dtype the library
// does not know (bytes are signed integers scaled by 1/16).
func toyDType(t *testing.T) dtype.DType {
	t.Helper()
	registerOnce.Do(func() {
		toyType, registerErr = dtype.Register(dtype.Spec{
			Name: "F8_TEST_SAVE", Bits: 8, Min: -8, Max: 127.0 / 16,
			Decode: func(dst []float32, src []byte) {
				for i, b := range src {
					dst[i] = float32(int8(b)) / 16
				}
			},
			Encode: func(dst []byte, src []float32, _ dtype.Options) dtype.Stats {
				for i, v := range src {
					dst[i] = byte(int8(max(-128, min(127, v*16))))
				}
				return dtype.Stats{}
			},
		})
	})
	if registerErr != nil {
		t.Fatal(registerErr)
	}
	return toyType
}

// tensor makes a tensor with deterministic contents.
func tensor(t testing.TB, name string, dt dtype.DType, shape ...int64) safetensors.TensorData {
	t.Helper()
	b, err := ckpttest.Fill(name, dt, shape)
	if err != nil {
		t.Fatal(err)
	}
	return safetensors.TensorData{Name: name, DType: dt, Shape: shape, Data: b}
}

// loadAll opens path with the loader keeping stored dtypes and returns
// every tensor's dtype, shape and bytes, failing on any difference from
// want.
func checkLoaded(t *testing.T, path string, want []safetensors.TensorData) {
	t.Helper()
	m, err := ckpt.Open(path, ckpt.WithDType(ckpt.AsStored), ckpt.WithScaleTensors())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := len(m.Names()); got != len(want) {
		t.Errorf("%s: %d tensors, want %d: %v", path, got, len(want), m.Names())
	}
	for _, w := range want {
		got, err := m.LoadTensor(context.Background(), w.Name)
		if err != nil {
			t.Errorf("%s: %v", w.Name, err)
			continue
		}
		if got.DType != w.DType || !slices.Equal(got.Shape, w.Shape) || !bytes.Equal(got.Bytes(), w.Data) {
			t.Errorf("%s: loaded %s%v (%d bytes), saved %s%v (%d bytes); bytes equal %v", w.Name,
				got.DType, got.Shape, len(got.Bytes()), w.DType, w.Shape, len(w.Data), bytes.Equal(got.Bytes(), w.Data))
		}
	}
}

// allDTypes is one tensor of every built-in dtype and of a registered one,
// named like a training checkpoint (FP8 weights with scales, optimizer
// state, a step counter).
func allDTypes(t *testing.T) []safetensors.TensorData {
	var ts []safetensors.TensorData
	for _, dt := range dtype.Builtins() {
		ts = append(ts, tensor(t, "params."+strings.ToLower(dt.String()), dt, 3, 8))
	}
	ts = append(ts,
		tensor(t, "model.layers.0.mlp.up_proj.weight", dtype.F8_E4M3, 256, 128),
		tensor(t, "model.layers.0.mlp.up_proj.weight_scale_inv", dtype.F32, 2, 1),
		tensor(t, "optimizer.state.0.exp_avg", dtype.F32, 256, 128),
		tensor(t, "optimizer.state.0.exp_avg_sq", dtype.F32, 256, 128),
		tensor(t, "optimizer.state.0.step", dtype.I64),
		tensor(t, "params.registered", toyDType(t), 5, 7),
		tensor(t, "params.empty", dtype.BF16, 0, 4),
	)
	return ts
}

func TestSaveEveryDTypeLoadsBitExact(t *testing.T) {
	dir := t.TempDir()
	ts := allDTypes(t)
	p, err := convert.Save(context.Background(), dir, ts, convert.SaveOptions{
		Step: 1200, Epoch: 2.5, MaxShardSize: 64 << 10, Metadata: map[string]string{"run": "r1",
			// Makes the FP8 weight's block scales self-describing.
			"quantization_config": `{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}`},
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("a synchronous save returned before it was done")
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != "checkpoint-1200" || res.Path != filepath.Join(dir, "checkpoint-1200") || res.Index == "" || len(res.Files) < 3 {
		t.Fatalf("result %+v: want checkpoint-1200 sharded in at least 3 files", res)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"checkpoint-1200"}) {
		t.Errorf("folder holds %v, want only the checkpoint", got)
	}
	checkLoaded(t, res.Path, ts)

	// Every shard carries the step, the epoch, "format": "pt" and the
	// caller's metadata.
	for _, f := range res.Files {
		sf, err := safetensors.Open(filepath.Join(res.Path, f))
		if err != nil {
			t.Fatal(err)
		}
		md := sf.Metadata()
		sf.Close()
		if md["step"] != "1200" || md["epoch"] != "2.5" || md["format"] != "pt" || md["run"] != "r1" {
			t.Errorf("%s: __metadata__ %v", f, md)
		}
	}
	cps, err := convert.Checkpoints(dir)
	if err != nil || len(cps) != 1 || cps[0].Step != 1200 || cps[0].Epoch != 2.5 || cps[0].Seq != 1 || cps[0].Metadata["run"] != "r1" {
		t.Errorf("Checkpoints: %+v, %v", cps, err)
	}
}

func TestSaveKeepLast(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes") // not a checkpoint: never removed
	if err := os.Mkdir(keep, 0o755); err != nil {
		t.Fatal(err)
	}
	var removed []string
	for step := int64(1); step <= 5; step++ {
		if step == 2 {
			// The user keeps the first checkpoint under another name: it is
			// theirs now, neither counted nor removed.
			if err := os.Rename(filepath.Join(dir, "checkpoint-10"), filepath.Join(dir, "best")); err != nil {
				t.Fatal(err)
			}
		}
		ts := []safetensors.TensorData{tensor(t, fmt.Sprintf("w%d", step), dtype.BF16, 4, 4)}
		p, err := convert.Save(context.Background(), dir, ts, convert.SaveOptions{Step: step * 10, KeepLast: 2})
		if err != nil {
			t.Fatal(err)
		}
		res, _ := p.Wait()
		if res.Seq != step {
			t.Errorf("step %d: seq %d", step, res.Seq)
		}
		removed = append(removed, res.Removed...)
		if len(res.Warnings) > 0 {
			t.Errorf("warnings: %v", res.Warnings)
		}
	}
	if got, want := testutil.Entries(t, dir), []string{"best", "checkpoint-40", "checkpoint-50", "notes"}; !slices.Equal(got, want) {
		t.Errorf("folder holds %v, want %v", got, want)
	}
	if want := []string{"checkpoint-20", "checkpoint-30"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	checkLoaded(t, filepath.Join(dir, "checkpoint-50"), []safetensors.TensorData{tensor(t, "w5", dtype.BF16, 4, 4)})
}

// TestSaveTrainingLoop is a training loop: every step updates the
// parameters and optimizer state in place, and every other step hands a
// snapshot to a background save while the loop goes on updating. Two
// snapshot buffers alternate; a buffer is refilled only after the save
// that held it is done, which WaitForPrevious guarantees (the next Save
// returns only once the previous one has finished). Every checkpoint must
// hold exactly its step's values.
func TestSaveTrainingLoop(t *testing.T) {
	dir := t.TempDir()
	const n = 1 << 14
	params := make([]float32, n)
	moments := make([]float32, n)
	var snaps [2][]safetensors.TensorData
	for i := range snaps {
		snaps[i] = []safetensors.TensorData{
			{Name: "w", DType: dtype.F32, Shape: []int64{n}, Data: make([]byte, 4*n)},
			{Name: "w.fp8", DType: dtype.F8_E4M3, Shape: []int64{n}, Data: make([]byte, n)},
			{Name: "opt.m", DType: dtype.F32, Shape: []int64{n}, Data: make([]byte, 4*n)},
		}
	}
	fill := func(s []safetensors.TensorData) {
		copy(s[0].Data, dtype.Float32Bytes(params))
		if _, err := dtype.Convert(s[1].Data, dtype.F8_E4M3, s[0].Data, dtype.F32, dtype.Options{Saturate: true}); err != nil {
			t.Fatal(err)
		}
		copy(s[2].Data, dtype.Float32Bytes(moments))
	}
	want := map[int64][]safetensors.TensorData{}
	var pending []*convert.Pending
	for step := int64(1); step <= 12; step++ {
		for i := range params { // the "training" step, in place
			params[i] += float32(step) * 0.001 * float32(i%7-3)
			moments[i] = 0.9*moments[i] + float32(step)
		}
		if step%2 != 0 {
			continue
		}
		s := snaps[(step/2)%2]
		fill(s)
		var copyOf []safetensors.TensorData
		for _, td := range s {
			copyOf = append(copyOf, safetensors.TensorData{Name: td.Name, DType: td.DType, Shape: td.Shape, Data: bytes.Clone(td.Data)})
		}
		want[step] = copyOf
		p, err := convert.Save(context.Background(), dir, s, convert.SaveOptions{Step: step, Epoch: float64(step) / 4, KeepLast: 3, Background: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) > 0 {
			select {
			case <-pending[len(pending)-1].Done():
			default:
				t.Fatal("Save returned while the previous save of the folder was running")
			}
		}
		pending = append(pending, p)
	}
	for i, p := range pending {
		res, err := p.Wait()
		if err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
		if len(res.Warnings) > 0 {
			t.Errorf("save %d: warnings %v", i, res.Warnings)
		}
	}
	cps, err := convert.Checkpoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, c := range cps {
		steps = append(steps, c.Step)
		checkLoaded(t, c.Path, want[c.Step])
	}
	if !slices.Equal(steps, []int64{8, 10, 12}) {
		t.Errorf("kept steps %v, want [8 10 12]", steps)
	}
	if got := len(testutil.Entries(t, dir)); got != 3 {
		t.Errorf("folder holds %v", testutil.Entries(t, dir))
	}
}

func TestSaveRefusePrevious(t *testing.T) {
	dir := t.TempDir()
	release := make(chan struct{})
	reached := make(chan struct{})
	var once atomic.Bool
	defer convert.SetHook(func(step string) {
		if step == "written" && once.CompareAndSwap(false, true) { // the first save only
			close(reached)
			<-release
		}
	})()
	ts := []safetensors.TensorData{tensor(t, "w", dtype.F16, 8)}
	first, err := convert.Save(context.Background(), dir, ts, convert.SaveOptions{Step: 1, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	<-reached
	_, err = convert.Save(context.Background(), dir, ts, convert.SaveOptions{Step: 2, Background: true, IfRunning: convert.RefusePrevious})
	if !errors.Is(err, convert.ErrBusy) {
		t.Errorf("second save while one runs, RefusePrevious: %v, want ErrBusy", err)
	}
	// WaitForPrevious waits until ctx is done.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = convert.Save(ctx, dir, ts, convert.SaveOptions{Step: 3})
	if !errors.Is(err, convert.ErrTarget) || !strings.Contains(err.Error(), "write: canceled") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second save while one runs, waiting past its deadline: %v", err)
	}
	// Another folder is independent.
	if _, err := convert.Save(context.Background(), t.TempDir(), ts, convert.SaveOptions{IfRunning: convert.RefusePrevious}); err != nil {
		t.Errorf("a save of another folder: %v", err)
	}
	close(release)
	if _, err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	// Once the first is done, a save is accepted at once.
	if _, err := convert.Save(context.Background(), dir, ts, convert.SaveOptions{Step: 2, IfRunning: convert.RefusePrevious}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"checkpoint-1", "checkpoint-2"}) {
		t.Errorf("folder holds %v", got)
	}
}

// TestSaveCanceled cancels a save at every step before its commit: the
// error is a canceled ErrWrite and the folder holds the previous checkpoint only,
// with nothing hidden left behind.
func TestSaveCanceled(t *testing.T) {
	for _, at := range []string{"before", "locked", "written", "synced"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			ts := []safetensors.TensorData{tensor(t, "a", dtype.F32, 64), tensor(t, "b", dtype.F32, 64)}
			if _, err := convert.Save(context.Background(), dir, ts, convert.SaveOptions{Step: 1}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			if at == "before" {
				cancel()
			}
			defer convert.SetHook(func(step string) {
				if step == at {
					cancel()
				}
			})()
			p, err := convert.Save(ctx, dir, ts, convert.SaveOptions{Step: 2, Background: true, MaxShardSize: 256})
			if err == nil {
				_, err = p.Wait()
			}
			if !errors.Is(err, convert.ErrTarget) || !strings.Contains(err.Error(), "write: canceled") || !errors.Is(err, context.Canceled) {
				t.Fatalf("canceled at %s: %v", at, err)
			}
			if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"checkpoint-1"}) {
				t.Errorf("folder holds %v", got)
			}
		})
	}
}

func TestSaveExistsAndOverwrite(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		t.Run(fmt.Sprintf("exchange=%v", atomic), func(t *testing.T) {
			if !atomic {
				defer convert.SetExchange(func(a, b string) error { return convert.ErrExchangeUnsupported })()
			}
			dir := t.TempDir()
			v1 := []safetensors.TensorData{tensor(t, "v1", dtype.F32, 4)}
			v2 := []safetensors.TensorData{tensor(t, "v2", dtype.BF16, 4)}
			if _, err := convert.Save(context.Background(), dir, v1, convert.SaveOptions{Name: "latest"}); err != nil {
				t.Fatal(err)
			}
			_, err := convert.Save(context.Background(), dir, v2, convert.SaveOptions{Name: "latest"})
			if !errors.Is(err, convert.ErrExists) {
				t.Fatalf("saving over a checkpoint: %v, want ErrExists", err)
			}
			if err := convert.Check(dir, []safetensors.TensorSpec{{Name: "v2", DType: dtype.BF16, Shape: []int64{4}}}, convert.SaveOptions{Name: "latest"}); !errors.Is(err, convert.ErrExists) {
				t.Errorf("Check: %v, want ErrExists", err)
			}
			p, err := convert.Save(context.Background(), dir, v2, convert.SaveOptions{Name: "latest", Overwrite: true})
			if err != nil {
				t.Fatal(err)
			}
			if res, _ := p.Wait(); !res.Replaced || len(res.Warnings) > 0 {
				t.Errorf("result %+v", res)
			}
			checkLoaded(t, filepath.Join(dir, "latest"), v2)
			if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"latest"}) {
				t.Errorf("folder holds %v", got)
			}
			// A folder Save did not write is never replaced.
			if err := os.Mkdir(filepath.Join(dir, "mine"), 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := convert.Save(context.Background(), dir, v2, convert.SaveOptions{Name: "mine", Overwrite: true}); !errors.Is(err, convert.ErrExists) {
				t.Errorf("overwriting a foreign folder: %v, want ErrExists", err)
			}
		})
	}
}

// TestSaveRestoresAside: an Overwrite killed between moving the old
// checkpoint aside and renaming the new one into place (the fallback where
// folders cannot be swapped) leaves the old one hidden; the next save
// restores it.
func TestSaveRestoresAside(t *testing.T) {
	dir := t.TempDir()
	v1 := []safetensors.TensorData{tensor(t, "v1", dtype.F32, 4)}
	if _, err := convert.Save(context.Background(), dir, v1, convert.SaveOptions{Name: "latest"}); err != nil {
		t.Fatal(err)
	}
	// Simulate the kill: the state the fallback leaves after its first
	// rename.
	aside := filepath.Join(dir, ".ckpt-old-0123456789ab.latest")
	if err := os.Rename(filepath.Join(dir, "latest"), aside); err != nil {
		t.Fatal(err)
	}
	p, err := convert.Save(context.Background(), dir, []safetensors.TensorData{tensor(t, "other", dtype.F32, 4)}, convert.SaveOptions{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := p.Wait()
	if len(res.Leftovers) != 1 || !strings.Contains(res.Leftovers[0], "restored") {
		t.Errorf("leftovers %v", res.Leftovers)
	}
	checkLoaded(t, filepath.Join(dir, "latest"), v1)
}

func TestSaveRemovesLeftovers(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{".ckpt-tmp-aaaaaaaaaaaa", ".ckpt-del-bbbbbbbbbbbb"} {
		if err := os.MkdirAll(filepath.Join(dir, n, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".ckpt-tmp-file"), nil, 0o644); err != nil { // not a folder: not ours
		t.Fatal(err)
	}
	p, err := convert.Save(context.Background(), dir, []safetensors.TensorData{tensor(t, "w", dtype.F32, 4)}, convert.SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := p.Wait()
	if len(res.Leftovers) != 2 {
		t.Errorf("leftovers %v", res.Leftovers)
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{".ckpt-tmp-file", "checkpoint-0"}) {
		t.Errorf("folder holds %v", got)
	}
}

func TestSaveNoSpace(t *testing.T) {
	defer convert.SetFreeSpace(func(string) (uint64, bool, error) { return 1000, true, nil })()
	dir := t.TempDir()
	ts := []safetensors.TensorData{tensor(t, "w", dtype.F32, 4096)}
	_, err := convert.Save(context.Background(), dir, ts, convert.SaveOptions{})
	var ce *convert.Error
	if !errors.As(err, &ce) || ce.Kind != convert.ErrNoSpace || !strings.Contains(ce.Msg, "1000 free") {
		t.Fatalf("save on a full disk: %v", err)
	}
	if got := testutil.Entries(t, dir); len(got) != 0 {
		t.Errorf("folder holds %v", got)
	}
}

// TestSaveRefusesBadTensors: Save checks what Check checks, and the data
// lengths, before anything is written, and reports every problem.
func TestSaveRefusesBadTensors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	ts := []safetensors.TensorData{
		tensor(t, "ok", dtype.F32, 4),
		{Name: "short", DType: dtype.F32, Shape: []int64{4}, Data: make([]byte, 15)},
		{Name: "fp4.odd", DType: dtype.F4, Shape: []int64{3}, Data: make([]byte, 2)},
		{Name: "", DType: dtype.F32, Shape: []int64{1}, Data: make([]byte, 4)},
	}
	_, err := convert.Save(context.Background(), dir, ts, convert.SaveOptions{})
	if !errors.Is(err, convert.ErrInvalid) {
		t.Errorf("error %v is not an ErrInvalid", err)
	}
	for _, check := range []string{`tensor "short": data length: `, `tensor "fp4.odd": shape: `, `name: `} {
		if !strings.Contains(err.Error(), check) {
			t.Errorf("error %v does not report %q", err, check)
		}
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the target folder was created: %v", serr)
	}
}

// TestSaveForeignManifests: folders with an unreadable or foreign manifest
// are never removed, and a save says so once.
func TestSaveForeignManifests(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"junk": "{", "other-tool": `{"format": "something-else"}`} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "checkpoint.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for step := int64(1); step <= 3; step++ {
		p, err := convert.Save(context.Background(), dir, []safetensors.TensorData{tensor(t, "w", dtype.F32, 4)}, convert.SaveOptions{Step: step, KeepLast: 1})
		if err != nil {
			t.Fatal(err)
		}
		res, _ := p.Wait()
		if len(res.Warnings) != 2 {
			t.Errorf("step %d: warnings %q, want one per foreign manifest", step, res.Warnings)
		}
	}
	if got := testutil.Entries(t, dir); !slices.Equal(got, []string{"checkpoint-3", "junk", "other-tool"}) {
		t.Errorf("folder holds %v", got)
	}
	cps, err := convert.Checkpoints(dir)
	if len(cps) != 1 || cps[0].Name != "checkpoint-3" || !errors.Is(err, convert.ErrTarget) || !strings.Contains(err.Error(), "junk") {
		t.Errorf("Checkpoints: %+v, %v", cps, err)
	}
}
