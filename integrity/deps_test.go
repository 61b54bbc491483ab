package integrity_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies checks that package integrity stays a lower layer: it
// reads through packages source and sink (a program that imports package
// remote gets s3:// and https://) and links neither the loader, the
// converter, the object-store clients nor the executors.
func TestDependencies(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/ckpt-go/ckpt/integrity").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "github.com/ckpt-go/ckpt", dep == "github.com/ckpt-go/ckpt/convert", dep == "github.com/ckpt-go/ckpt/remote",
			strings.HasPrefix(dep, "github.com/ckpt-go/ckpt/executor"), strings.HasPrefix(dep, "github.com/aws/"):
			t.Errorf("package integrity depends on %s", dep)
		}
	}
}
