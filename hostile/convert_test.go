package hostile_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/hostile"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

// TestConvert runs convert.Run (to BF16, into a fresh folder) on every
// hostile case, with and without FollowSymlinks: it answers as the loader
// does on the weights, under the deadline, or refuses a non-weight file
// of the folder it would copy (a FIFO, a device, a link out of the
// folder) with an ErrSource that says "copy" and names it, before writing
// anything.
func TestConvert(t *testing.T) {
	for _, c := range hostile.Cases(t) {
		t.Run(c.Name, func(t *testing.T) {
			type target struct {
				what, path, want, pkg string
				follow                bool
			}
			targets := []target{
				{"convert.Run(dir)", c.Dir, c.Folder, "variant", false},
				{"convert.Run(dir, FollowSymlinks)", c.Dir, c.FolderFollow, "variant", true},
			}
			if c.File != "" {
				targets = append(targets,
					target{"convert.Run(file)", c.Path(), c.ShardWant, "shard", false},
					target{"convert.Run(file, FollowSymlinks)", c.Path(), c.ShardFollow, "shard", true})
			}
			for _, tg := range targets {
				out := filepath.Join(t.TempDir(), "out")
				if strings.HasSuffix(tg.path, ".safetensors") || strings.HasSuffix(tg.path, ".json") {
					out += string(filepath.Separator)
				}
				err := testutil.Within(t, tg.what+" "+tg.path, func() error {
					_, err := convert.Run(context.Background(), tg.path, out, convert.Options{Policy: ckpt.Policy{Default: ckpt.To(dtype.BF16)}, FollowSymlinks: tg.follow})
					return err
				})
				var ce *convert.Error
				if errors.As(err, &ce) && ce.Kind == convert.ErrSource && strings.HasPrefix(ce.Msg, "copy") {
					if ce.Path == "" || !strings.Contains(err.Error(), ce.Path) {
						t.Errorf("%s: a copy refused without naming the file: %v", tg.what, err)
					}
					continue
				}
				check(t, tg.what, tg.pkg, err, tg.want, c.Culprit)
				if tg.want != hostile.OK && err != nil && !errors.Is(err, convert.ErrSource) {
					t.Errorf("%s: %v is not an ErrSource", tg.what, err)
				}
			}
		})
	}
}
