// Command loadrss loads a checkpoint with the loader and touches every
// byte of the result, for measuring the peak resident memory of a load
// with /usr/bin/time -v:
//
//	/usr/bin/time -v go run ./cmd/loadrss -dtype F32 PATH   # converting load
//	/usr/bin/time -v go run ./cmd/loadrss PATH              # zero-copy load
//
// (better: go build -o /tmp/loadrss ./cmd/loadrss and time the binary). It
// prints the bytes it touched and the owned (converted) bytes, so that the
// "Maximum resident set size" line can be compared with them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/internal/sysmem"
)

func main() {
	to := flag.String("dtype", "stored", "target of every tensor (a dtype, stored or quantized)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: loadrss [-dtype D] PATH")
		os.Exit(2)
	}
	t, err := ckpt.ParseTarget(*to)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	m, err := ckpt.Open(flag.Arg(0), ckpt.WithDType(t))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer m.Close()
	w, err := m.Load(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer w.Close()
	var touched, owned int64
	var sum byte
	for _, tn := range w.All() {
		b := tn.Bytes()
		for i := 0; i < len(b); i += 4096 {
			sum += b[i]
		}
		touched += int64(len(b))
		if tn.Location.Owned {
			owned += int64(len(b))
		}
	}
	fmt.Printf("touched %d bytes (%s), owned %d bytes (%s), checksum %d\n", touched, sysmem.FormatSize(touched), owned, sysmem.FormatSize(owned), sum)
}
