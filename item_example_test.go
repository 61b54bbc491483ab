package ckpt_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// A backend that puts weights on its own device reads each tensor's part
// as the loader decided it: here rank 1 of 2, with q_proj split by rows and
// o_proj by columns, converted to F32.
func ExampleModel_Items() {
	dir, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")
	if err := ckpttest.WriteFile(path, ckpttest.MustParseTensors("q_proj.weight:BF16[8,4] o_proj.weight:BF16[4,8] norm.weight:F32[4]"), nil); err != nil {
		log.Fatal(err)
	}
	m, err := ckpt.Open(path, ckpt.WithDType(ckpt.To(dtype.F32)), ckpt.WithRank(1, 2,
		ckpt.Split{Pattern: ckpt.MustParsePattern("q_proj.weight"), Dim: 0},
		ckpt.Split{Pattern: ckpt.MustParsePattern("o_proj.weight"), Dim: 1}))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	items, err := m.Items()
	if err != nil {
		log.Fatal(err)
	}
	for _, it := range items {
		stored := make([]byte, it.Data.Size())
		if _, err := it.Data.ReadAt(stored, 0); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-14s %-7s %v→%v %v reads %d bytes: %v\n", it.Key, it.Action, it.Stored, it.DType, it.Shape, len(stored), it.Data.Range)
	}
	// Output:
	// q_proj.weight  convert BF16→F32 [4 4] reads 32 bytes: 248+32
	// o_proj.weight  convert BF16→F32 [4 4] reads 32 bytes: 288+8×4/16
	// norm.weight    view    F32→F32 [4] reads 16 bytes: 344+16
}
