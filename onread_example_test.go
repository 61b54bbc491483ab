package ckpt_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// A consumer that reads every byte of the views anyway (here: hashing
// them) has them verified by that read: the load hands the views out
// unverified, and Chunks checks each tensor's checksum once the loop has
// seen its last byte. A damaged tensor is the loop's last error.
func ExampleTensor_Chunks() {
	dir, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i % 61)
	}
	// safetensors.Save writes a checksum of every tensor.
	if err := safetensors.Save(context.Background(), path, []safetensors.TensorData{
		{Name: "embed.weight", DType: dtype.BF16, Shape: []int64{1024, 512}, Data: data},
	}, nil); err != nil {
		log.Fatal(err)
	}
	hash := func() {
		m, err := ckpt.Open(path, ckpt.WithViewCheck(ckpt.ViewCheckOnRead), ckpt.WithReadStrategy("mmap"))
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		w, err := m.Load(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		defer w.Close()
		for name, t := range w.All() {
			h := sha256.New()
			for b, err := range t.Chunks() {
				if err != nil {
					fmt.Printf("%s: damaged: %v\n", name, errors.Is(err, ckpt.ErrChecksum))
					return
				}
				h.Write(b)
			}
			fmt.Printf("%s: %x…, pending %v\n", name, h.Sum(nil)[:4], t.Pending())
		}
	}
	hash()
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte{0xff}, 100_000) // inside the tensor's bytes
	f.Close()
	hash()
	// Output:
	// embed.weight: d4b6a977…, pending false
	// embed.weight: damaged: true
}
