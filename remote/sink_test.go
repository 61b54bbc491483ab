package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/remote"
)

// randomBytes returns n pseudo-random bytes (a fixed seed per n).
func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// openUploads lists the multipart uploads in progress in bucket.
func openUploads(t *testing.T, s *s3test.Server, bucket string) []string {
	t.Helper()
	out, err := s.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, u := range out.Uploads {
		keys = append(keys, aws.ToString(u.Key)+" "+aws.ToString(u.UploadId))
	}
	return keys
}

func writeAll(t *testing.T, f interface{ Write([]byte) (int, error) }, data []byte, piece int) error {
	t.Helper()
	for len(data) > 0 {
		n := min(piece, len(data))
		if _, err := f.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Files of several parts (uploaded two at a time) and of less than one
// part come back byte for byte; FS reads them through the sink's prefix.
func TestS3SinkWrites(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	sink := remote.NewS3Sink(s.Client(), bucket, "runs/r1", remote.WithPartSize(remote.MinPartSize), remote.WithUploadConcurrency(2))
	if got := sink.Location("a.bin"); got != "s3://"+bucket+"/runs/r1/a.bin" {
		t.Errorf("Location: %s", got)
	}
	for _, tc := range []struct {
		name string
		size int
	}{{"big.safetensors", 3*remote.MinPartSize + 12345}, {"exact.bin", 2 * remote.MinPartSize}, {"small.json", 100}, {"empty", 0}} {
		data := randomBytes(tc.size)
		f, err := sink.Create(context.Background(), tc.name, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeAll(t, f, data, 1<<20+3); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := f.Abort(); err != nil {
			t.Errorf("Abort after Close: %v", err)
		}
		if got := s.Get(t, bucket, "runs/r1/"+tc.name); !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes back, want %d", tc.name, len(got), len(data))
		}
		// The server kept the parts' CRC-32C (a composite checksum).
		h, err := s.Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("runs/r1/" + tc.name), ChecksumMode: types.ChecksumModeEnabled})
		if err != nil || aws.ToString(h.ChecksumCRC32C) == "" {
			t.Errorf("%s: no CRC-32C stored (%v)", tc.name, err)
		} else {
			t.Logf("%s: CRC-32C %s", tc.name, aws.ToString(h.ChecksumCRC32C))
		}
		b, err := fs.ReadFile(sink.FS(), tc.name)
		if err != nil || !bytes.Equal(b, data) {
			t.Errorf("%s through FS: %d bytes, %v", tc.name, len(b), err)
		}
	}
	es, err := fs.ReadDir(sink.FS(), ".")
	if err != nil || len(es) != 4 {
		t.Errorf("ReadDir: %v, %v", es, err)
	}
	if err := sink.Remove(context.Background(), "small.json"); err != nil {
		t.Fatal(err)
	}
	if err := sink.Remove(context.Background(), "small.json"); err != nil {
		t.Errorf("removing a missing object: %v", err)
	}
	if ups := openUploads(t, s, bucket); len(ups) != 0 {
		t.Errorf("uploads left: %v", ups)
	}
}

// An exclusive file never replaces an object of its name, small or in
// parts; the refusal matches fs.ErrExist and remote.ErrExists.
func TestS3SinkExclusive(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	sink := remote.NewS3Sink(s.Client(), bucket, "", remote.WithPartSize(remote.MinPartSize))
	for _, size := range []int{10, 2*remote.MinPartSize + 1} {
		f, err := sink.Create(context.Background(), "index.json", true)
		if err != nil {
			t.Fatal(err)
		}
		s.Put(t, bucket, "index.json", []byte("theirs"))
		if err := writeAll(t, f, randomBytes(size), 1<<20); err != nil {
			t.Fatal(err)
		}
		err = f.Close()
		if !errors.Is(err, fs.ErrExist) || !errors.Is(err, remote.ErrExists) {
			t.Fatalf("%d bytes over an object written meanwhile: %v", size, err)
		}
		if got := s.Get(t, bucket, "index.json"); string(got) != "theirs" {
			t.Errorf("the object was replaced: %q", got)
		}
		if ups := openUploads(t, s, bucket); len(ups) != 0 {
			t.Errorf("uploads left: %v", ups)
		}
		s.Delete(t, bucket, "index.json")
	}
	// Free: written.
	f, _ := sink.Create(context.Background(), "index.json", true)
	f.Write([]byte("mine"))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// CreateReplacing replaces only the version Version saw (If-Match), small
// or in parts: an object replaced or removed since is left as it is, the
// refusal matching fs.ErrExist and remote.ErrExists, no upload left.
func TestS3SinkReplacing(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	sink := remote.NewS3Sink(s.Client(), bucket, "ck", remote.WithPartSize(remote.MinPartSize))
	ctx := context.Background()
	if _, err := sink.Version(ctx, "index.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Version of a missing object: %v", err)
	}
	for _, size := range []int{10, 2*remote.MinPartSize + 1} {
		s.Put(t, bucket, "ck/index.json", []byte("first"))
		seen, err := sink.Version(ctx, "index.json")
		if err != nil || seen == "" {
			t.Fatalf("Version: %q, %v", seen, err)
		}
		// Replaced meanwhile: refused.
		f, err := sink.CreateReplacing(ctx, "index.json", seen)
		if err != nil {
			t.Fatal(err)
		}
		s.Put(t, bucket, "ck/index.json", []byte("theirs"))
		if err := writeAll(t, f, randomBytes(size), 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); !errors.Is(err, fs.ErrExist) || !errors.Is(err, remote.ErrExists) {
			t.Fatalf("%d bytes over an object replaced meanwhile: %v", size, err)
		}
		if got := s.Get(t, bucket, "ck/index.json"); string(got) != "theirs" {
			t.Errorf("%d bytes: the object was replaced: %q", size, got)
		}
		// Removed meanwhile: refused, nothing written.
		theirs, _ := sink.Version(ctx, "index.json")
		f, _ = sink.CreateReplacing(ctx, "index.json", theirs)
		s.Delete(t, bucket, "ck/index.json")
		writeAll(t, f, randomBytes(size), 1<<20)
		if err := f.Close(); !errors.Is(err, remote.ErrExists) {
			t.Fatalf("%d bytes over an object removed meanwhile: %v", size, err)
		}
		if got := s.Get(t, bucket, "ck/index.json"); got != nil {
			t.Errorf("%d bytes: an object was written over a removed one", size)
		}
		// Still the version seen: replaced.
		s.Put(t, bucket, "ck/index.json", []byte("first"))
		seen, _ = sink.Version(ctx, "index.json")
		f, _ = sink.CreateReplacing(ctx, "index.json", seen)
		data := randomBytes(size)
		writeAll(t, f, data, 1<<20)
		if err := f.Close(); err != nil {
			t.Fatalf("%d bytes over the version seen: %v", size, err)
		}
		if got := s.Get(t, bucket, "ck/index.json"); !bytes.Equal(got, data) {
			t.Errorf("%d bytes: %d bytes back", size, len(got))
		}
		if ups := openUploads(t, s, bucket); len(ups) != 0 {
			t.Errorf("uploads left: %v", ups)
		}
	}
}

// Abort, a cancelled context and a failed part leave no multipart upload
// and no object.
func TestS3SinkAbort(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	data := randomBytes(4 * remote.MinPartSize)

	// Abort after parts were sent.
	sink := remote.NewS3Sink(s.Client(), bucket, "p", remote.WithPartSize(remote.MinPartSize))
	f, _ := sink.Create(context.Background(), "aborted", false)
	if err := writeAll(t, f, data[:3*remote.MinPartSize], 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{1}); err == nil {
		t.Error("Write after Abort")
	}

	// Cancelled while writing.
	ctx, cancel := context.WithCancel(context.Background())
	f, _ = sink.Create(ctx, "cancelled", false)
	if err := writeAll(t, f, data[:2*remote.MinPartSize], 1<<20); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := writeAll(t, f, data[2*remote.MinPartSize:], 1<<20); !errors.Is(err, context.Canceled) {
		t.Errorf("Write after cancel: %v", err)
	}
	if err := f.Close(); err == nil {
		t.Error("Close after cancel succeeded")
	}
	f.Abort()

	// A part refused by the server (a proxy answers 400 to the second).
	var parts atomic.Int64
	proxy := failingProxy(t, s.Endpoint, func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Query().Get("partNumber") != "" && parts.Add(1) == 2
	})
	sink = remote.NewS3Sink(s.ClientAt(proxy), bucket, "p", remote.WithPartSize(remote.MinPartSize))
	f, _ = sink.Create(context.Background(), "failed", false)
	err := writeAll(t, f, data, 1<<20)
	if err == nil {
		err = f.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "uploading part") || !strings.Contains(err.Error(), "BadDigest") {
		t.Errorf("a refused part: %v", err)
	}
	if err := f.Abort(); err != nil {
		t.Errorf("Abort: %v", err)
	}

	for _, key := range []string{"p/aborted", "p/cancelled", "p/failed"} {
		if got := s.Get(t, bucket, key); got != nil {
			t.Errorf("%s exists (%d bytes)", key, len(got))
		}
	}
	if ups := openUploads(t, s, bucket); len(ups) != 0 {
		t.Errorf("uploads left: %v", ups)
	}
}

// failingProxy forwards requests to endpoint, answering 400 to those that
// fail selects.
func failingProxy(t *testing.T, endpoint string, fail func(*http.Request) bool) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail(r) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>BadDigest</Code><Message>injected</Message></Error>`)
			return
		}
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = u.Scheme, u.Host
		out.Host = r.Host
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(func() { srv.Close(); tr.CloseIdleConnections() })
	return srv.URL
}

// BenchmarkS3SinkWrite uploads 64 MiB through an S3Sink (16 MiB parts,
// 1 or 4 in flight) and, for comparison, with one PutObject of the same
// bytes by the same client.
func BenchmarkS3SinkWrite(b *testing.B) {
	s := needS3(b)
	bucket := s.NewBucket(b)
	data := randomBytes(64 << 20)
	for _, conc := range []int{1, 4} {
		b.Run(fmt.Sprintf("sink-parts-in-flight-%d", conc), func(b *testing.B) {
			sink := remote.NewS3Sink(s.Client(), bucket, "bench", remote.WithUploadConcurrency(conc))
			b.SetBytes(int64(len(data)))
			for range b.N {
				f, err := sink.Create(context.Background(), "obj", false)
				if err != nil {
					b.Fatal(err)
				}
				for off := 0; off < len(data); off += 1 << 20 {
					if _, err := f.Write(data[off : off+1<<20]); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("putobject", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for range b.N {
			_, err := s.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("bench/put"),
				Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// AbortUploads aborts the uploads in progress under one folder of the
// sink, and under the whole sink with "", never those outside it.
func TestS3SinkAbortUploads(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	ctx := context.Background()
	for _, key := range []string{"run/a/x.safetensors", "run/a/deeper/y.safetensors", "run/ab/z.safetensors", "other/w.safetensors"} {
		if _, err := s.Client().CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
			t.Fatal(err)
		}
	}
	sink := remote.NewS3Sink(s.Client(), bucket, "run")
	left := func() (keys []string) {
		for _, u := range openUploads(t, s, bucket) {
			k, _, _ := strings.Cut(u, " ")
			keys = append(keys, k)
		}
		return keys
	}
	if n, err := sink.AbortUploads(ctx, "a"); n != 2 || err != nil {
		t.Fatalf("AbortUploads(a): %d, %v", n, err)
	}
	if got := left(); len(got) != 2 || got[0] != "other/w.safetensors" || got[1] != "run/ab/z.safetensors" {
		t.Fatalf("left after a: %v", got)
	}
	if n, err := sink.AbortUploads(ctx, ""); n != 1 || err != nil {
		t.Fatalf("AbortUploads(\"\"): %d, %v", n, err)
	}
	if got := left(); len(got) != 1 || got[0] != "other/w.safetensors" {
		t.Fatalf("left after the sink's root: %v", got)
	}
	if _, err := sink.AbortUploads(ctx, "../other"); !errors.Is(err, remote.ErrInvalid) || !strings.Contains(err.Error(), "not a folder name") {
		t.Errorf("AbortUploads(../other): %v", err)
	}
}
