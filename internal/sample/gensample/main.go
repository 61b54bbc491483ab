// Command gensample writes the demo sample checkpoint into the folder given
// as its argument. It is run by `go generate ./cmd/ckpt`.
package main

import (
	"fmt"
	"os"

	"github.com/ckpt-go/ckpt/internal/sample"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gensample DIR")
		os.Exit(2)
	}
	if err := os.RemoveAll(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := sample.Write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
