package integrity_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/safetensors"
)

// benchFile writes, once per machine, a checksummed BF16 file of mib MiB
// (CKPT_BENCH_VERIFY_MIB overrides) made of tensors of tensorMiB MiB, in
// the system's temporary folder, and returns its path and size.
func benchFile(b *testing.B, mib, tensorMiB int) (string, int64) {
	b.Helper()
	if s := os.Getenv("CKPT_BENCH_VERIFY_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("ckpt-bench-verify-%d-%d.safetensors", mib, tensorMiB))
	if st, err := os.Stat(path); err == nil {
		return path, st.Size()
	}
	n := mib / tensorMiB
	elems := int64(tensorMiB) << 20 / 2
	specs := make([]safetensors.TensorSpec, n)
	for i := range specs {
		specs[i] = safetensors.TensorSpec{Name: fmt.Sprintf("layers.%d.weight", i), DType: dtype.BF16, Shape: []int64{elems}}
	}
	fw, err := safetensors.Create(context.Background(), path, specs, map[string]string{"format": "pt"})
	if err != nil {
		b.Fatal(err)
	}
	defer fw.Close()
	chunk := make([]byte, 1<<20)
	for i := 0; ; i++ {
		_, w, err := fw.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		for off := int64(0); off < elems*2; off += int64(len(chunk)) {
			for j := range chunk {
				chunk[j] = byte(j*7 + i + int(off>>20))
			}
			if _, err := w.Write(chunk[:min(int64(len(chunk)), elems*2-off)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := fw.Commit(); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return path, st.Size()
}

// BenchmarkVerify verifies a 1 GiB checksummed file (every byte read and
// its CRC-32C checked, page cache warm) against `cp` of the same file to a
// new file beside it, in the same run. MB/s are of the file's bytes.
//
//	go test ./integrity -run '^$' -bench Verify -count 6
func BenchmarkVerify(b *testing.B) {
	benchVerifyVsCp(b, benchFile, func(rep *integrity.Report) int64 { return rep.VerifiedBytes })
}

// benchVerifyVsCp runs, for a file of 1 GiB in tensors of 16 MiB and one in
// tensors of 1 MiB (written by file), Verify of the file ("/verify": it
// must pass, and verified(report) must cover all but 1 MiB of the file)
// and `cp` of the file to a new file beside it ("/cp"), in the same run.
// MB/s are of the file's bytes.
func benchVerifyVsCp(b *testing.B, file func(b *testing.B, mib, tensorMiB int) (string, int64), verified func(*integrity.Report) int64) {
	for _, c := range []struct {
		name           string
		mib, tensorMiB int
	}{
		{"1GiB-16MiB-tensors", 1024, 16},
		{"1GiB-1MiB-tensors", 1024, 1},
	} {
		path, size := file(b, c.mib, c.tensorMiB)
		b.Run(c.name+"/verify", func(b *testing.B) {
			b.SetBytes(size)
			for range b.N {
				rep, err := integrity.Verify(context.Background(), path)
				if err != nil || !rep.OK() || verified(rep) < size-(1<<20) {
					b.Fatalf("%v %+v", err, rep)
				}
			}
		})
		b.Run(c.name+"/cp", func(b *testing.B) {
			cp, err := exec.LookPath("cp")
			if err != nil {
				b.Skip("no cp:", err)
			}
			dst := filepath.Join(b.TempDir(), "copy"+filepath.Ext(path))
			b.SetBytes(size)
			for range b.N {
				if out, err := exec.Command(cp, path, dst).CombinedOutput(); err != nil {
					b.Fatalf("cp: %v: %s", err, out)
				}
				b.StopTimer()
				os.Remove(dst)
				b.StartTimer()
			}
		})
	}
}

// benchTorchFile writes, once per machine, a PyTorch checkpoint of mib
// MiB (CKPT_BENCH_VERIFY_MIB overrides) of BF16 tensors of tensorMiB MiB,
// each its own storage record (ckpttest.EncodeTorch: as torch.save lays
// it out), in the system's temporary folder, and returns its path and
// size.
func benchTorchFile(b *testing.B, mib, tensorMiB int) (string, int64) {
	b.Helper()
	if s := os.Getenv("CKPT_BENCH_VERIFY_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("ckpt-bench-verify-%d-%d.pt", mib, tensorMiB))
	if st, err := os.Stat(path); err == nil {
		return path, st.Size()
	}
	n := mib / tensorMiB
	elems := int64(tensorMiB) << 20 / 2
	var views []ckpttest.TorchTensor
	storages := map[string]ckpttest.TorchStorage{}
	for i := range n {
		key := strconv.Itoa(i)
		data := make([]byte, elems*2)
		for j := range data {
			data[j] = byte(j*7 + i)
		}
		views = append(views, ckpttest.TorchTensor{Name: fmt.Sprintf("layers.%d.weight", i), Storage: key, Shape: []int64{elems}, Stride: []int64{1}})
		storages[key] = ckpttest.TorchStorage{DType: dtype.BF16, Data: data}
	}
	data, err := ckpttest.EncodeTorch(views, storages, false)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		b.Fatal(err)
	}
	return path, int64(len(data))
}

// BenchmarkVerifyTorch verifies a 1 GiB PyTorch checkpoint (the archive
// opened, every record read and its CRC-32 compared with the zip
// directory's, page cache warm) against `cp` of the same file to a new
// file beside it, in the same run. MB/s are of the file's bytes.
//
//	go test ./integrity -run '^$' -bench VerifyTorch -count 6
func BenchmarkVerifyTorch(b *testing.B) {
	benchVerifyVsCp(b, benchTorchFile, func(rep *integrity.Report) int64 { return rep.ArchiveBytes })
}
