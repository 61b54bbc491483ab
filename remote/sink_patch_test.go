package remote_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/sink"
)

// The first part of a file stays in memory until Close, so that a writer
// rewrites its first bytes (a safetensors header's checksums) after the
// rest was sent; it is uploaded last, as part 1.
func TestS3SinkPatch(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	ss := remote.NewS3Sink(s.Client(), bucket, "p", remote.WithPartSize(remote.MinPartSize), remote.WithUploadConcurrency(2))
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		size, reserve int
	}{
		{"parts.bin", 3*remote.MinPartSize + 777, 4096},
		// A first part larger than a part: all of it rewritable.
		{"bighead.bin", 3*remote.MinPartSize + 777, remote.MinPartSize + 1000},
		// One PutObject, patched in its buffer; a little more than a part.
		{"small.bin", 1000, 64},
		{"justover.bin", remote.MinPartSize + 5, 64},
	} {
		data := randomBytes(tc.size)
		f, err := ss.Create(ctx, tc.name, false)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := f.(sink.Patchable)
		if !ok {
			t.Fatalf("%T is not sink.Patchable", f)
		}
		if err := p.Reserve(int64(tc.reserve)); err != nil {
			t.Fatal(err)
		}
		if err := writeAll(t, p, data, 1<<20+3); err != nil {
			t.Fatal(err)
		}
		if err := p.Reserve(1); err == nil {
			t.Errorf("%s: Reserve after a write", tc.name)
		}
		// Rewrite the first and the last reserved bytes.
		want := bytes.Clone(data)
		for _, off := range []int{0, tc.reserve - 8} {
			patch := []byte("PATCHED!")
			copy(want[off:], patch)
			if _, err := p.WriteAt(patch, int64(off)); err != nil {
				t.Fatalf("%s: WriteAt %d: %v", tc.name, off, err)
			}
		}
		if tc.size > 2*remote.MinPartSize+tc.reserve {
			// Bytes already sent cannot be rewritten.
			if _, err := p.WriteAt([]byte("x"), int64(tc.size-1)); !errors.Is(err, remote.ErrRequest) {
				t.Errorf("%s: WriteAt of sent bytes: %v", tc.name, err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := s.Get(t, bucket, "p/"+tc.name); !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes back, not the patched file (%d bytes)", tc.name, len(got), len(want))
		}
		if _, err := p.WriteAt([]byte("x"), 0); err == nil {
			t.Errorf("%s: WriteAt after Close", tc.name)
		}
	}
	f, _ := ss.Create(ctx, "huge", false)
	if err := f.(sink.Patchable).Reserve(6 << 30); err == nil {
		t.Error("a first part over 5 GiB")
	}
	f.Abort()
	if ups := openUploads(t, s, bucket); len(ups) != 0 {
		t.Errorf("uploads left: %v", ups)
	}
}
