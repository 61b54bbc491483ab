package remote_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoConvertDependency checks that a program reading or writing S3
// links neither the converter nor what only it needs (the unpickler, the
// quantizers): remote writes through package sink, which package convert
// uses too, and never imports convert.
func TestNoConvertDependency(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/ckpt-go/ckpt/remote").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "github.com/ckpt-go/ckpt/convert", "github.com/ckpt-go/ckpt/torch", "github.com/ckpt-go/ckpt/quant", "github.com/ckpt-go/ckpt":
			t.Errorf("package remote depends on %s", dep)
		}
	}
}
