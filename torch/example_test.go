package torch_test

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/torch"
)

// Convert a checkpoint written by torch.save to safetensors. In
// tied_bf16.pt, lm_head.weight is the same storage as embed.weight, and
// proj.weight_t a transposed view.
func Example() {
	ck, err := torch.Open("testdata/tied_bf16.pt")
	if err != nil {
		log.Fatal(err)
	}
	defer ck.Close()
	for name, t := range ck.Tensors() {
		fmt.Println(name, t.DType(), t.Shape(), t.Contiguous())
	}
	fmt.Println("aliases:", ck.Aliases())

	dir, _ := os.MkdirTemp("", "torch-example")
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "model.safetensors")
	if err := torch.WriteSafetensors(context.Background(), ck, out); err != nil {
		log.Fatal(err)
	}
	f, err := safetensors.Open(out)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	fmt.Println(f.Len(), "tensors;", torch.AliasesKey, "=", f.Metadata()[torch.AliasesKey])
	// Output:
	// embed.weight BF16 [64 16] true
	// proj.weight_t BF16 [12 8] false
	// proj.rows BF16 [3 12] true
	// proj.weight BF16 [8 12] true
	// aliases: map[lm_head.weight:embed.weight]
	// 4 tensors; ckpt.aliases = {"lm_head.weight":"embed.weight"}
}

// A training checkpoint's non-tensor values become metadata; its state dict
// flattens to dotted names.
func ExampleCheckpoint_Metadata() {
	ck, err := torch.Open("testdata/train_state.pt")
	if err != nil {
		log.Fatal(err)
	}
	defer ck.Close()
	fmt.Println(ck.Names())
	m := ck.Metadata()
	fmt.Println(m["epoch"], m["step"], m["lr"])
	// Output:
	// [model.enc.weight model.enc.bias]
	// 3 1200 0.0003
}

// A checkpoint whose pickle imports anything but what a state dict needs is
// refused before anything is read or written. This one's data.pkl would
// run a command under torch.load: GLOBAL posix.system, then REDUCE.
func ExampleErrForbiddenGlobal() {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, r := range []struct{ name, data string }{
		{"evil/data.pkl", "\x80\x02cposix\nsystem\nX\x02\x00\x00\x00id\x85R."},
		{"evil/version", "3\n"},
	} {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: r.name, Method: zip.Store})
		if err != nil {
			log.Fatal(err)
		}
		io.WriteString(w, r.data)
	}
	if err := zw.Close(); err != nil {
		log.Fatal(err)
	}
	_, err := torch.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()), "suspicious.pt")
	var e *torch.Error
	if errors.Is(err, torch.ErrForbiddenGlobal) && errors.As(err, &e) {
		fmt.Println("refused: the pickle imports", e.Global)
	}
	// Output:
	// refused: the pickle imports posix system
}
