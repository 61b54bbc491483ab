package ckpt_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/executor"
	"github.com/ckpt-go/ckpt/executor/cpu"
	"github.com/ckpt-go/ckpt/quant"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/torch"
	"github.com/ckpt-go/ckpt/variant"
)

// A condition several packages share is one value: a caller tests it with
// errors.Is against that value whichever package reported it.
func TestSharedConditions(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		is   error
	}{
		{"safetensors closed", &safetensors.Error{Kind: safetensors.ErrClosed}, fs.ErrClosed},
		{"shard closed", &shard.Error{Kind: shard.ErrClosed}, fs.ErrClosed},
		{"torch closed", &torch.Error{Kind: torch.ErrClosed}, fs.ErrClosed},
		{"ckpt closed", &ckpt.Error{Kind: ckpt.ErrClosed}, fs.ErrClosed},
		{"executor closed", &executor.Error{Kind: executor.ErrClosed}, fs.ErrClosed},
		{"shard tensor not found", &shard.Error{Kind: shard.ErrTensorNotFound}, safetensors.ErrTensorNotFound},
		{"torch tensor not found", &torch.Error{Kind: torch.ErrTensorNotFound}, safetensors.ErrTensorNotFound},
		{"torch not regular", &torch.Error{Kind: torch.ErrNotRegular}, safetensors.ErrNotRegular},
		{"shard not regular", &shard.Error{Kind: shard.ErrNotRegular}, safetensors.ErrNotRegular},
		{"variant not regular", &variant.Error{Kind: variant.ErrNotRegular}, safetensors.ErrNotRegular},
		{"variant insecure path", &variant.Error{Kind: variant.ErrInsecurePath}, shard.ErrInsecurePath},
		{"variant missing shard", &variant.Error{Kind: variant.ErrMissingShard}, shard.ErrMissingShard},
		{"torch insecure path", &torch.Error{Kind: torch.ErrInsecurePath}, shard.ErrInsecurePath},
		{"torch missing shard", &torch.Error{Kind: torch.ErrMissingShard}, shard.ErrMissingShard},
		{"executor budget", &executor.Error{Kind: executor.ErrBudget}, ckpt.ErrBudget},
	} {
		if !errors.Is(c.err, c.is) {
			t.Errorf("%s: errors.Is(%v, %v) is false", c.name, c.err, c.is)
		}
		wrapped := &ckpt.Error{Kind: ckpt.ErrResolve, Err: c.err}
		if !errors.Is(wrapped, c.is) {
			t.Errorf("%s, wrapped by the loader: errors.Is is false", c.name)
		}
	}
	// Other kinds do not match the shared values.
	if errors.Is(&shard.Error{Kind: shard.ErrMissingShard}, fs.ErrClosed) || errors.Is(&variant.Error{Kind: variant.ErrMissingShard}, shard.ErrInsecurePath) {
		t.Error("a kind matched another condition")
	}
}

// A canceled operation's error matches context.Canceled whichever package
// reports it: no package has a canceled kind of its own.
func TestCanceledConditions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	tensors := []safetensors.TensorData{{Name: "w", DType: dtype.F32, Shape: []int64{1}, Data: make([]byte, 4)}}
	ex, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"safetensors", func() error { return safetensors.Save(ctx, filepath.Join(dir, "a.safetensors"), tensors, nil) }},
		{"shard", func() error {
			_, err := shard.Write(ctx, filepath.Join(dir, "b"), "model", "", tensors, nil)
			return err
		}},
		{"convert", func() error {
			_, err := convert.Save(ctx, filepath.Join(dir, "c"), tensors, convert.SaveOptions{})
			return err
		}},
		{"quant", func() error {
			_, err := (&quant.Weight{Name: "w"}).DequantizeContext(ctx, nil, dtype.BF16, nil, nil, dtype.Options{})
			return err
		}},
		{"executor/cpu", func() error { _, err := ex.FromHost(ctx, make([]byte, 4), dtype.F32, []int64{1}, "w"); return err }},
	} {
		err := c.run()
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "canceled") {
			t.Errorf("%s: %v, want an error matching context.Canceled", c.name, err)
		}
		wrapped := &ckpt.Error{Kind: ckpt.ErrResolve, Err: err}
		if !errors.Is(wrapped, context.Canceled) {
			t.Errorf("%s, wrapped by the loader: errors.Is is false", c.name)
		}
	}
}
