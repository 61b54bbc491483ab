package ckpttest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// MaxDecompressed bounds the size of a decompressed fixture (4 GiB), so a
// corrupt or hostile .zst file cannot fill the disk.
const MaxDecompressed = 4 << 30

// maxWindow bounds the decoder's memory: a frame asking for a larger window
// is refused.
const maxWindow = 256 << 20

// Decompress decompresses the zstd file src (normally NAME.safetensors.zst)
// into dstDir and returns the new file's path, dstDir/NAME.safetensors. The
// output is limited to MaxDecompressed bytes; a partial output is removed on
// error.
func Decompress(src, dstDir string) (string, error) {
	base := filepath.Base(src)
	if !strings.HasSuffix(base, ".zst") || len(base) == len(".zst") {
		return "", &Error{Op: "decompress", Path: src, Msg: "name must end in .zst"}
	}
	in, err := os.Open(src)
	if err != nil {
		return "", &Error{Op: "decompress", Path: src, Err: err}
	}
	defer in.Close()
	dec, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxWindow))
	if err != nil {
		return "", &Error{Op: "decompress", Path: src, Err: err}
	}
	defer dec.Close()
	dst := filepath.Join(dstDir, strings.TrimSuffix(base, ".zst"))
	out, err := os.Create(dst)
	if err != nil {
		return "", &Error{Op: "decompress", Path: dst, Err: err}
	}
	n, err := io.Copy(out, io.LimitReader(dec, MaxDecompressed+1))
	if err == nil && n > MaxDecompressed {
		err = fmt.Errorf("decompressed size exceeds %d bytes", int64(MaxDecompressed))
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return "", &Error{Op: "decompress", Path: src, Err: err}
	}
	return dst, nil
}

// Compress writes a zstd-compressed copy of src to dst (conventionally
// src + ".zst"), for checking fixtures into testdata.
func Compress(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return &Error{Op: "compress", Path: src, Err: err}
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return &Error{Op: "compress", Path: dst, Err: err}
	}
	enc, err := zstd.NewWriter(out, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err == nil {
		_, err = io.Copy(enc, in)
		if cerr := enc.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return &Error{Op: "compress", Path: src, Err: err}
	}
	return nil
}
