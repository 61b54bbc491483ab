package shard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// Write splits tensors into shards of at most 1 KiB and writes the index;
// Open reads the set back as one checkpoint.
func ExampleWrite() {
	dir, err := os.MkdirTemp("", "shard-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	var tensors []safetensors.TensorData
	for i := range 3 {
		tensors = append(tensors, safetensors.TensorData{
			Name: fmt.Sprintf("layers.%d.weight", i), DType: dtype.BF16, Shape: []int64{16, 16},
			Data: make([]byte, 16*16*2), // 512 bytes
		})
	}
	max, _ := shard.ParseSize("1KiB")
	res, err := shard.Write(context.Background(), dir, "model", "bf16", tensors, map[string]string{"format": "pt"}, shard.WithMaxShardSize(max))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Index)
	for _, f := range res.Files {
		fmt.Println(f)
	}

	c, err := shard.Open(filepath.Join(dir, res.Index))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	t, err := c.Tensor("layers.2.weight")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Len(), "tensors;", t.Name(), t.DType(), t.Shape())
	// Output:
	// model.safetensors.index.bf16.json
	// model.bf16-00001-of-00002.safetensors
	// model.bf16-00002-of-00002.safetensors
	// 3 tensors; layers.2.weight BF16 [16 16]
}

// ReadIndex validates an index without touching the shards; an index is
// untrusted input, so a shard name that is a path is refused.
func ExampleReadIndex() {
	dir, _ := os.MkdirTemp("", "shard-example")
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "model.safetensors.index.json")
	os.WriteFile(p, []byte(`{"weight_map": {"w": "../../etc/passwd.safetensors"}}`), 0o644)
	_, err := shard.ReadIndex(p)
	var e *shard.Error
	if errors.As(err, &e) {
		fmt.Println(e.Kind.String(), e.Tensor, e.Shard)
	}
	// Output:
	// insecure_path w ../../etc/passwd.safetensors
}
