package ckpt_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/executor"
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
		{"shard not regular", &shard.Error{Kind: shard.ErrNotRegular}, safetensors.ErrNotRegular},
		{"variant not regular", &variant.Error{Kind: variant.ErrNotRegular}, safetensors.ErrNotRegular},
		{"variant insecure path", &variant.Error{Kind: variant.ErrInsecurePath}, shard.ErrInsecurePath},
		{"variant missing shard", &variant.Error{Kind: variant.ErrMissingShard}, shard.ErrMissingShard},
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
