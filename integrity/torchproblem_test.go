package integrity

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ckpt-go/ckpt/torch"
)

// TestTorchProblemNamesTensorOnce checks that a torch error about a tensor
// becomes a problem naming the tensor once, in the problem's own place,
// with the rest of the torch message kept and the error kept for errors.As.
func TestTorchProblemNamesTensorOnce(t *testing.T) {
	te := &torch.Error{Kind: torch.ErrIO, File: "model.bin", Record: "archive/data/0", Tensor: "w", Msg: "short read"}
	err := fmt.Errorf("opening: %w", te)
	p := torchProblem("model.bin", err)
	if want := `model.bin: tensor "w": model.bin: archive/data/0: short read`; p.Message != want {
		t.Errorf("message %q, want %q", p.Message, want)
	}
	if p.Kind != IO || p.Tensor != "w" {
		t.Errorf("kind %v tensor %q, want %v and \"w\"", p.Kind, p.Tensor, IO)
	}
	var got *torch.Error
	if !errors.As(p.Err, &got) || got != te || te.Tensor != "w" {
		t.Errorf("the problem's error is %v, want the torch error unchanged", p.Err)
	}
}
