package convert_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/testutil"
	"github.com/ckpt-go/ckpt/safetensors"
)

// FuzzManifest plants arbitrary bytes as the manifest of a folder beside
// the checkpoints Save writes with KeepLast 1: Checkpoints and Save never
// panic, and the folder is removed only when its manifest is a valid one
// naming it (then it is Save's).
func FuzzManifest(f *testing.F) {
	f.Add([]byte(`{"format": "ckpt.checkpoint/v1", "name": "planted", "seq": 1}`))
	f.Add([]byte(`{"format": "ckpt.checkpoint/v1", "name": "other", "seq": 99}`))
	f.Add([]byte(`{"format": "ckpt.checkpoint/v1", "name": "planted", "seq": -9223372036854775808, "files": null}`))
	f.Add([]byte(`{"format": "ckpt.checkpoint/v1", "name": "planted", "seq": 9223372036854775807}`))
	f.Add([]byte(`{"format": 1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte("\xff"))
	f.Fuzz(func(t *testing.T, manifest []byte) {
		dir := t.TempDir()
		planted := filepath.Join(dir, "planted")
		if err := os.Mkdir(planted, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(planted, "checkpoint.json"), manifest, 0o644); err != nil {
			t.Fatal(err)
		}
		before, _ := convert.Checkpoints(dir)
		ours := len(before) == 1
		for step := int64(1); step <= 2; step++ {
			p, err := convert.Save(context.Background(), dir, []safetensors.TensorData{{Name: "w", DType: dtype.U8, Shape: []int64{1}, Data: []byte{1}}}, convert.SaveOptions{Step: step, KeepLast: 1})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Wait(); err != nil {
				t.Fatal(err)
			}
		}
		cps, _ := convert.Checkpoints(dir)
		for i := 1; i < len(cps); i++ {
			if cps[i].Seq <= cps[i-1].Seq {
				t.Errorf("save order %d after %d", cps[i].Seq, cps[i-1].Seq)
			}
		}
		got := testutil.Entries(t, dir)
		if ours != !slices.Contains(got, "planted") {
			t.Errorf("manifest %q (Save's: %v): folder holds %v", manifest, ours, got)
		}
	})
}
