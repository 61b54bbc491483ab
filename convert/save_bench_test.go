package convert_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// BenchmarkSave saves a 256 MiB checkpoint (64 tensors of 4 MiB: F32
// optimizer state, BF16 and FP8 weights) in 2 shards, keeping the last
// one: the cost of one training save, fsyncs included. bytes/s is tensor
// data written. The baseline, write-fsync, writes the same bytes as two
// plain files and fsyncs them (what any durable save costs at least).
func BenchmarkSave(b *testing.B) {
	var ts []safetensors.TensorData
	var total int64
	for i := range 64 {
		dt := [3]dtype.DType{dtype.F32, dtype.BF16, dtype.F8_E4M3}[i%3]
		n := int64(4<<20) / int64(dt.Bits()/8)
		data := make([]byte, 4<<20)
		for j := range data {
			data[j] = byte(j * (i + 1))
		}
		ts = append(ts, safetensors.TensorData{Name: fmt.Sprintf("t%02d", i), DType: dt, Shape: []int64{n}, Data: data})
		total += int64(len(data))
	}
	b.Run("write-fsync", func(b *testing.B) {
		dir := b.TempDir()
		b.SetBytes(total)
		for i := range b.N {
			for s := range 2 {
				f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%d-%d", i%2, s)))
				if err != nil {
					b.Fatal(err)
				}
				for _, td := range ts[s*32 : s*32+32] {
					if _, err := f.Write(td.Data); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		}
	})
	b.Run("save", func(b *testing.B) {
		dir := b.TempDir()
		b.SetBytes(total)
		for i := range b.N {
			p, err := convert.Save(context.Background(), dir, ts, convert.SaveOptions{Step: int64(i), KeepLast: 1, MaxShardSize: 128 << 20})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
