//go:build linux || darwin || freebsd

package bench_test

import (
	"os"
	"testing"

	"github.com/ckpt-go/ckpt/safetensors"
	nlp "github.com/nlpodyssey/safetensors"
	"golang.org/x/sys/unix"
)

// BenchmarkOpenFile: open a file from disk (mmap), view every tensor
// zero-copy, close. ckpt's Open maps the file itself; nlpodyssey has no
// file API, so it gets the same mmap done by hand around Deserialize.
// MB/s of header.
func BenchmarkOpenFile(b *testing.B) {
	for _, fx := range fixtures(b, b.TempDir()) {
		b.Run(fx.name+"/impl=ckpt", func(b *testing.B) {
			b.SetBytes(int64(len(fx.header)))
			b.ReportAllocs()
			for range b.N {
				f, err := safetensors.Open(fx.path)
				if err != nil {
					b.Fatal(err)
				}
				for _, t := range f.Tensors() {
					if _, err := t.Bytes(); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fx.name+"/impl=nlpodyssey", func(b *testing.B) {
			b.SetBytes(int64(len(fx.header)))
			b.ReportAllocs()
			for range b.N {
				m, err := mmapFile(fx.path)
				if err != nil {
					b.Fatal(err)
				}
				st, err := nlp.Deserialize(m)
				if err != nil {
					b.Fatal(err)
				}
				for _, v := range st.Tensors() {
					_ = v.TensorView.Data()
				}
				if err := unix.Munmap(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func mmapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
}
