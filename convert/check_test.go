package convert_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

// problems flattens Check's joined error into its *convert.Error values.
func problems(t *testing.T, err error) []*convert.Error {
	t.Helper()
	if err == nil {
		return nil
	}
	var out []*convert.Error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var ce *convert.Error
		if !errors.As(err, &ce) {
			t.Errorf("not a *convert.Error: %v", err)
			return
		}
		out = append(out, ce)
	}
	walk(err)
	return out
}

func spec(name string, dt dtype.DType, shape ...int64) safetensors.TensorSpec {
	return safetensors.TensorSpec{Name: name, DType: dt, Shape: shape}
}

func TestCheckAcceptsATrainingCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "runs", "r1") // not there yet
	specs := []safetensors.TensorSpec{
		spec("model.embed_tokens.weight", dtype.BF16, 32000, 4096),
		spec("model.layers.0.mlp.up_proj.weight", dtype.F8_E4M3, 11008, 4096),
		spec("model.layers.0.mlp.up_proj.weight_scale_inv", dtype.F32, 86, 32),
		spec("model.layers.0.mlp.experts.w", dtype.F4, 64, 4096),
		spec("model.layers.0.mlp.experts.w_scale", dtype.F8_E8M0, 64, 128),
		spec("model.layers.0.fp6", dtype.F6_E2M3, 4, 4),
		spec("optimizer.state.0.exp_avg", dtype.F32, 11008, 4096),
		spec("optimizer.state.0.step", dtype.I64),
		spec("params.registered", toyDType(t), 3),
		spec("rng.state", dtype.U8, 5056),
		spec("empty", dtype.F16, 0),
	}
	if err := convert.Check(dir, specs, convert.SaveOptions{Step: 0, KeepLast: 3, MaxShardSize: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "..")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Check created the target: %v", err)
	}
	base := filepath.Dir(filepath.Dir(dir))
	if got := testutil.Entries(t, base); len(got) != 0 {
		t.Errorf("Check left %v", got)
	}
}

// TestCheckReportsEverything gives Check one bad spec or option of every
// kind and expects each one reported, naming its tensor or field.
func TestCheckReportsEverything(t *testing.T) {
	specs := []safetensors.TensorSpec{
		spec("ok", dtype.F32, 4),
		spec("", dtype.F32, 1),
		spec("__metadata__", dtype.F32, 1),
		spec("bad\xffutf8", dtype.F32, 1),
		spec("new\nline", dtype.F32, 1),
		spec("ok", dtype.F16, 4),
		spec("unknown.dtype", dtype.DType(9999), 4),
		spec("negative", dtype.F32, 4, -1),
		spec("overflow", dtype.F64, math.MaxInt64/2, 4),
		spec("fp4.odd", dtype.F4, 3),
		spec("fp6.ragged", dtype.F6_E3M2, 6),
	}
	opts := convert.SaveOptions{
		Name: "../escape", Prefix: "model.v2", MaxShardSize: -1, KeepLast: -2, Epoch: math.NaN(),
		IfRunning: 7, Metadata: map[string]string{"step": "3", "note": "\xff"},
	}
	err := convert.Check(t.TempDir(), specs, opts)
	// A problem's key: its kind, what it is about, and for ErrInvalid the
	// check that failed, which starts its message (or, for metadata, the
	// field that names it).
	type key struct {
		kind  convert.ErrorKind
		about string
		check string
	}
	var got []key
	for _, e := range problems(t, err) {
		check, _, _ := strings.Cut(e.Msg, ":")
		if e.Kind != convert.ErrInvalid || strings.HasPrefix(e.Field, "metadata") {
			check = ""
		}
		got = append(got, key{e.Kind, e.Tensor + e.Field, check})
		if e.Path == "" {
			t.Errorf("%v names no folder", e)
		}
	}
	want := []key{
		{convert.ErrInvalid, "", "name"},
		{convert.ErrInvalid, "__metadata__", "name"},
		{convert.ErrInvalid, "bad\xffutf8", "name"},
		{convert.ErrInvalid, "new\nline", "name"},
		{convert.ErrInvalid, "ok", "duplicate"},
		{convert.ErrInvalid, "unknown.dtype", "dtype"},
		{convert.ErrInvalid, "negative", "shape"},
		{convert.ErrInvalid, "overflow", "shape"},
		{convert.ErrInvalid, "fp4.odd", "shape"},
		{convert.ErrInvalid, "fp6.ragged", "shape"},
		{convert.ErrOption, "Name", ""},
		{convert.ErrOption, "Prefix", ""},
		{convert.ErrOption, "MaxShardSize", ""},
		{convert.ErrOption, "KeepLast", ""},
		{convert.ErrOption, "Epoch", ""},
		{convert.ErrOption, "IfRunning", ""},
		{convert.ErrInvalid, "metadata step", ""},
		{convert.ErrInvalid, `metadata "note"`, ""},
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing %v %q %q", w.kind, w.about, w.check)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(got), len(want), err)
	}
	if !strings.Contains(err.Error(), `tensor "fp4.odd"`) {
		t.Errorf("message does not name the tensor: %v", err)
	}
}

func TestCheckTarget(t *testing.T) {
	ok := []safetensors.TensorSpec{spec("w", dtype.F32, 16)}
	t.Run("file in the way", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := convert.Check(filepath.Join(f, "sub"), ok, convert.SaveOptions{}); !errors.Is(err, convert.ErrTarget) {
			t.Errorf("Check under a file: %v", err)
		}
	})
	t.Run("read-only", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes into read-only folders")
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		if err := convert.Check(dir, ok, convert.SaveOptions{}); !errors.Is(err, convert.ErrTarget) {
			t.Errorf("Check in a read-only folder: %v", err)
		}
	})
	t.Run("no space", func(t *testing.T) {
		// 4 PiB: more than any test machine's disk, checked with the real
		// statfs.
		huge := []safetensors.TensorSpec{spec("w", dtype.F32, 1<<50)}
		if err := convert.Check(t.TempDir(), huge, convert.SaveOptions{}); !errors.Is(err, convert.ErrNoSpace) {
			t.Errorf("Check of 4 PiB: %v", err)
		}
		defer convert.SetFreeSpace(func(string) (uint64, bool, error) { return 100, true, nil })()
		err := convert.Check(t.TempDir(), ok, convert.SaveOptions{})
		if !errors.Is(err, convert.ErrNoSpace) {
			t.Errorf("Check with 100 bytes free: %v", err)
		}
	})
}
