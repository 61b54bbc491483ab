package remote_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/source"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crcB64(b []byte) string {
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc32.Checksum(b, castagnoli))
	return base64.StdEncoding.EncodeToString(c[:])
}

// putCRC stores data under key with its CRC-32C (a FULL_OBJECT checksum).
func putCRC(t *testing.T, s *s3test.Server, bucket, key string, data []byte) {
	t.Helper()
	_, err := s.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumCRC32C: aws.String(crcB64(data))})
	if err != nil {
		t.Fatalf("put s3://%s/%s: %v", bucket, key, err)
	}
}

// putParts stores data under key as a multipart upload of parts of
// partSize, each with its CRC-32C; the object's checksum is of type typ
// (COMPOSITE or FULL_OBJECT).
func putParts(t *testing.T, s *s3test.Server, bucket, key string, data []byte, partSize int, typ types.ChecksumType) {
	t.Helper()
	ctx, c := context.Background(), s.Client()
	mp, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumType: typ})
	if err != nil {
		t.Fatal(err)
	}
	var parts []types.CompletedPart
	for i, off := int32(1), 0; off < len(data); i, off = i+1, off+partSize {
		p := data[off:min(off+partSize, len(data))]
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: mp.UploadId,
			PartNumber: aws.Int32(i), Body: bytes.NewReader(p), ContentLength: aws.Int64(int64(len(p))),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumCRC32C: aws.String(crcB64(p))})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(i), ChecksumCRC32C: aws.String(crcB64(p))})
	}
	in := &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}
	if typ == types.ChecksumTypeFullObject {
		in.ChecksumType, in.ChecksumCRC32C = typ, aws.String(crcB64(data))
	}
	if _, err := c.CompleteMultipartUpload(ctx, in); err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil || h.ChecksumType != typ || aws.ToString(h.ChecksumCRC32C) == "" {
		t.Fatalf("the store did not keep the %s checksum: %v %+v", typ, err, h)
	}
}

// uploadCRC is upload with every object stored with its CRC-32C.
func uploadCRC(t *testing.T, shards int, spec, prefix string) (s *s3test.Server, bucket, dir string) {
	t.Helper()
	s = needLocalS3(t) // the tests change objects behind the server's back
	dir = ckpttest.Dir(t, ckpttest.Weights{Shards: shards, Tensors: ckpttest.Tensors(t, spec)})
	bucket = s.NewBucket(t)
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		data, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		putCRC(t, s, bucket, prefix+"/"+de.Name(), data)
	}
	return s, bucket, dir
}

// stored is the file the server keeps an object in.
func stored(s *s3test.Server, bucket, key string) string {
	return filepath.Join(s.Dir(), bucket, filepath.FromSlash(key))
}

// flipBit flips one bit of the stored object at off, behind the server's
// back: its ETag and checksum stay those of the bytes it was given.
func flipBit(t *testing.T, s *s3test.Server, bucket, key string, off int64) {
	t.Helper()
	f, err := os.OpenFile(stored(s, bucket, key), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x08
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// dataMiddle is an offset in the middle of a safetensors file's data.
func dataMiddle(t *testing.T, file string) int64 {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	start := 8 + int64(binary.LittleEndian.Uint64(data))
	return start + (int64(len(data))-start)/2
}

// checksumErr checks that err is remote's ErrChecksum (which is
// ckpt.ErrChecksum) naming the object at loc.
func checksumErr(t *testing.T, what string, err error, loc string) {
	t.Helper()
	var re *remote.Error
	if !errors.Is(err, ckpt.ErrChecksum) || !errors.Is(err, safetensors.ErrChecksum) || !errors.As(err, &re) ||
		re.Kind != remote.ErrChecksum || re.Location != loc || !strings.Contains(err.Error(), "ETag") {
		t.Fatalf("%s: want remote's checksum error naming %s, got %v", what, loc, err)
	}
	t.Logf("%s: %v", what, err)
}

// A checkpoint whose objects carry CRC-32Cs loads (one HeadObject per
// shard read, none for the JSON files, none at all when planning); a bit
// flipped in a shard behind the store's back is refused by the loader —
// through ckpt.Open("s3://…") and through an FS — and by package remote's
// own reads, with ErrChecksum naming the object. Objects stored without a
// CRC-32C read as before.
func TestS3StoreChecksumFlippedBit(t *testing.T) {
	s, bucket, dir := uploadCRC(t, 3, tensorSpec(12), "m")
	const shard2 = "m/model-00002-of-00003.safetensors"
	loc := "s3://" + bucket + "/" + shard2
	want := load(t, open(t, dir))

	fsys := remote.NewS3FS(s.Client(), bucket)
	m := open(t, "m", ckpt.WithFS(fsys))
	if _, err := m.Plan(); err != nil {
		t.Fatal(err)
	}
	if st := fsys.Stats(); st.HEADs != 0 {
		t.Errorf("planning asked for checksums: %+v", st)
	}
	sameTensors(t, "with checksums", load(t, m), want)
	if st := fsys.Stats(); st.HEADs != 3 {
		t.Errorf("load: %+v, want one HEAD per shard", st)
	}
	if ok, err := fsys.VerifyObject(context.Background(), shard2); !ok || err != nil {
		t.Fatalf("VerifyObject: %v %v", ok, err)
	}

	flipBit(t, s, bucket, shard2, dataMiddle(t, filepath.Join(dir, "model-00002-of-00003.safetensors")))
	// The same Model (and FS) loaded again: the store's bytes for the ETag
	// pinned differ from those it gave before, which is an error, never a
	// silent reload.
	_, err := tryLoad(context.Background(), m)
	checksumErr(t, "loaded again", err, loc)

	// The loader, through an FS and through the registered location,
	// the loader's own tensor checksums off (remote alone finds it) and on.
	useClient(t)
	for _, tc := range []struct {
		name string
		m    func() *ckpt.Model
	}{
		{"FS", func() *ckpt.Model {
			return open(t, "m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket)), ckpt.WithVerify(ckpt.VerifyNever))
		}},
		{"location", func() *ckpt.Model { return open(t, "s3://"+bucket+"/m", ckpt.WithVerify(ckpt.VerifyNever)) }},
		{"concurrency 1", func() *ckpt.Model {
			return open(t, "m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket, remote.WithConcurrency(1), remote.WithChunkSize(64<<10))),
				ckpt.WithVerify(ckpt.VerifyNever))
		}},
	} {
		_, err := tryLoad(context.Background(), tc.m())
		checksumErr(t, tc.name, err, loc)
		if !errors.Is(err, ckpt.ErrRead) {
			t.Errorf("%s: not a read error of the loader: %v", tc.name, err)
		}
	}
	if _, err := tryLoad(context.Background(), open(t, "s3://"+bucket+"/m")); !errors.Is(err, ckpt.ErrChecksum) {
		t.Fatalf("default policy: %v", err)
	}

	// Package remote's own reads: the whole object through ReadRanges,
	// ReadAt past the first bytes, VerifyObject.
	fsys = remote.NewS3FS(s.Client(), bucket)
	st, err := fs.Stat(fsys, shard2)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, st.Size())
	checksumErr(t, "ReadRanges", fsys.ReadRanges(context.Background(), shard2, []source.Span{{Off: 0, Dst: buf}}), loc)
	// Every later read of the object fails too.
	checksumErr(t, "ReadRanges again", fsys.ReadRanges(context.Background(), shard2, []source.Span{{Off: 10, Dst: buf[:10]}}), loc)
	// The bytes between two spans of one request are read, and count:
	// spans around the flipped byte still cover the object.
	mid := dataMiddle(t, filepath.Join(dir, "model-00002-of-00003.safetensors"))
	err = remote.NewS3FS(s.Client(), bucket).ReadRanges(context.Background(), shard2,
		[]source.Span{{Off: 0, Dst: buf[:mid-10]}, {Off: mid + 10, Dst: buf[mid+10:]}})
	checksumErr(t, "ReadRanges with a gap", err, loc)

	small := remote.NewS3FS(s.Client(), bucket, remote.WithHeadSize(4<<10))
	_, err = fs.ReadFile(small, shard2)
	checksumErr(t, "ReadFile", err, loc)

	ok, err := remote.NewS3FS(s.Client(), bucket).VerifyObject(context.Background(), shard2)
	checksumErr(t, "VerifyObject", err, loc)
	if ok {
		t.Error("VerifyObject: ok with an error")
	}

	// Partial reads are not compared (the whole object is needed).
	fsys = remote.NewS3FS(s.Client(), bucket)
	if err := fsys.ReadRanges(context.Background(), shard2, []source.Span{{Off: 0, Dst: buf[:len(buf)-1]}}); err != nil {
		t.Errorf("a read of all but the last byte: %v", err)
	}

	// Without stored CRC-32Cs: read as before, not verified.
	plain := s.NewBucket(t)
	s.PutDir(t, plain, "m", dir)
	flipBit(t, s, plain, shard2, dataMiddle(t, filepath.Join(dir, "model-00002-of-00003.safetensors")))
	fsys = remote.NewS3FS(s.Client(), plain)
	got := load(t, open(t, "m", ckpt.WithFS(fsys), ckpt.WithVerify(ckpt.VerifyNever)))
	if len(got) != len(want) {
		t.Errorf("%d tensors", len(got))
	}
	if ok, err := fsys.VerifyObject(context.Background(), shard2); ok || err != nil {
		t.Errorf("VerifyObject without a stored checksum: %v %v", ok, err)
	}
	// Turned off: nothing asked, nothing compared.
	fsys = remote.NewS3FS(s.Client(), bucket, remote.WithStoreChecksums(false))
	if _, err := tryLoad(context.Background(), open(t, "m", ckpt.WithFS(fsys), ckpt.WithVerify(ckpt.VerifyNever))); err != nil {
		t.Errorf("WithStoreChecksums(false): %v", err)
	}
	if st := fsys.Stats(); st.HEADs != 0 {
		t.Errorf("WithStoreChecksums(false) asked: %+v", st)
	}
}

// Multipart objects: a FULL_OBJECT CRC-32C is compared like a single
// part's; a COMPOSITE one (the CRC of the parts' CRCs, "-N") with the part
// boundaries the store gives (versitygw lists no parts in
// GetObjectAttributes, so one HeadObject per part). A bit flipped in any
// part fails the load naming the object.
func TestS3StoreChecksumMultipart(t *testing.T) {
	s := needLocalS3(t)
	const part = 5 << 20                                                                                             // the least the store takes
	file := ckpttest.File(t, ckpttest.Tensors(t, "a:F32[1024,1024] b:BF16[1024,2048] c:F32[768,1024] d:F16[33]")...) // 11 MiB: 3 parts
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := load(t, open(t, file))
	for _, typ := range []types.ChecksumType{types.ChecksumTypeComposite, types.ChecksumTypeFullObject} {
		t.Run(string(typ), func(t *testing.T) {
			bucket := s.NewBucket(t)
			putParts(t, s, bucket, "model.safetensors", data, part, typ)
			loc := "s3://" + bucket + "/model.safetensors"
			fsys := remote.NewS3FS(s.Client(), bucket, remote.WithChunkSize(1<<20))
			sameTensors(t, "good", load(t, open(t, "model.safetensors", ckpt.WithFS(fsys))), want)
			heads := int64(1)
			if typ == types.ChecksumTypeComposite {
				heads += 1 + 3 // GetObjectAttributes, then a HeadObject per part
			}
			if st := fsys.Stats(); st.HEADs != heads {
				t.Errorf("%+v, want %d HEADs", st, heads)
			}
			if ok, err := fsys.VerifyObject(context.Background(), "model.safetensors"); !ok || err != nil {
				t.Errorf("VerifyObject: %v %v", ok, err)
			}
			for _, at := range []int64{part + 12345, int64(len(data)) - 1} { // parts 2 and 3
				flipBit(t, s, bucket, "model.safetensors", at)
				m := open(t, "model.safetensors", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket, remote.WithChunkSize(1<<20))),
					ckpt.WithVerify(ckpt.VerifyNever))
				_, err := tryLoad(context.Background(), m)
				checksumErr(t, fmt.Sprintf("flip at %d", at), err, loc)
				if typ == types.ChecksumTypeComposite && !strings.Contains(err.Error(), "-3") {
					t.Errorf("the composite checksum is not named: %v", err)
				}
				flipBit(t, s, bucket, "model.safetensors", at) // back
			}
		})
	}
}

// A truncated object: truncated before it is opened, the loader refuses
// it (its header claims more bytes) and VerifyObject finds the CRC differs;
// truncated after it was opened, the store answers for the pinned ETag
// with another size, which is ErrChecksum too, never a reload.
func TestS3StoreChecksumTruncated(t *testing.T) {
	s, bucket, dir := uploadCRC(t, 2, tensorSpec(8), "m")
	const shard = "m/model-00002-of-00002.safetensors"
	loc := "s3://" + bucket + "/" + shard
	want := load(t, open(t, dir))
	st, err := os.Stat(stored(s, bucket, shard))
	if err != nil {
		t.Fatal(err)
	}

	// Opened, then truncated.
	fsys := remote.NewS3FS(s.Client(), bucket)
	m := open(t, "m", ckpt.WithFS(fsys), ckpt.WithVerify(ckpt.VerifyNever))
	sameTensors(t, "whole", load(t, m), want)
	if err := os.Truncate(stored(s, bucket, shard), st.Size()-100); err != nil {
		t.Fatal(err)
	}
	_, err = tryLoad(context.Background(), m)
	checksumErr(t, "truncated after open", err, loc)
	if !strings.Contains(err.Error(), fmt.Sprint(st.Size()-100)) {
		t.Errorf("the sizes are not named: %v", err)
	}

	// Truncated, then opened.
	_, err = ckpt.Open("m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket)))
	if err == nil || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
		t.Errorf("a truncated shard opened: %v", err)
	}
	_, err = remote.NewS3FS(s.Client(), bucket).VerifyObject(context.Background(), shard)
	checksumErr(t, "VerifyObject of a truncated object", err, loc)
}

// With a cache: an object whose bytes fail the store's checksum is never
// committed to the cache; a committed entry damaged on local disk is
// found by the same check, refused and removed, and the next load fetches
// the object again.
func TestS3StoreChecksumCache(t *testing.T) {
	s, bucket, dir := uploadCRC(t, 2, tensorSpec(8), "m")
	const shard = "m/model-00001-of-00002.safetensors"
	loc := "s3://" + bucket + "/" + shard
	want := load(t, open(t, dir))
	cdir := t.TempDir()
	cache, err := remote.NewCache(cdir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	entries := func() []string {
		m, _ := filepath.Glob(filepath.Join(cdir, "*.obj"))
		return m
	}
	mid := dataMiddle(t, filepath.Join(dir, "model-00001-of-00002.safetensors"))

	flipBit(t, s, bucket, shard, mid)
	m := open(t, "m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache))), ckpt.WithVerify(ckpt.VerifyNever))
	_, err = tryLoad(context.Background(), m)
	checksumErr(t, "through the cache", err, loc)
	m.Close()
	// Only the good shard (and the JSON files read whole) may be cached.
	for _, e := range entries() {
		b, _ := os.ReadFile(e)
		orig, _ := os.ReadFile(filepath.Join(dir, "model-00001-of-00002.safetensors"))
		if len(b) == len(orig) {
			t.Errorf("the damaged object was cached: %s", e)
		}
	}
	flipBit(t, s, bucket, shard, mid) // back

	orig, _ := os.ReadFile(filepath.Join(dir, "model-00001-of-00002.safetensors"))
	// damaged loads the checkpoint, which caches the shard, and damages
	// the cached copy on disk.
	damaged := func() string {
		m := open(t, "m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache))))
		sameTensors(t, "cached", load(t, m), want)
		m.Close()
		var entry string
		for _, e := range entries() {
			if b, _ := os.ReadFile(e); bytes.Equal(b, orig) {
				entry = e
			}
		}
		if entry == "" {
			t.Fatal("the shard was not cached")
		}
		f, err := os.OpenFile(entry, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{orig[mid] ^ 1}, mid); err != nil {
			t.Fatal(err)
		}
		return entry
	}

	// Read around the damaged byte: the bytes between the spans are read
	// from the entry and count.
	entry := damaged()
	buf := make([]byte, len(orig))
	err = remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache)).ReadRanges(context.Background(), shard,
		[]source.Span{{Off: 0, Dst: buf[:mid-5]}, {Off: mid + 5, Dst: buf[mid+5:]}})
	checksumErr(t, "damaged cache entry, a gap", err, loc)
	if _, err := os.Stat(entry); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the damaged entry was kept: %v", err)
	}

	entry = damaged()
	fsys := remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache))
	m = open(t, "m", ckpt.WithFS(fsys), ckpt.WithVerify(ckpt.VerifyNever))
	_, err = tryLoad(context.Background(), m)
	checksumErr(t, "damaged cache entry, a load", err, loc)
	m.Close()
	if _, err := os.Stat(entry); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the damaged entry was kept: %v", err)
	}
	m = open(t, "m", ckpt.WithFS(remote.NewS3FS(s.Client(), bucket, remote.WithCache(cache))))
	sameTensors(t, "fetched again", load(t, m), want)
}

// Files written by an S3Sink (a multipart upload with a CRC-32C per part,
// or one PutObject with its CRC-32C for a small file) are verified when
// read back, whichever checksum type the sink asks for.
func TestS3StoreChecksumSinkWritten(t *testing.T) {
	s := needLocalS3(t)
	bucket := s.NewBucket(t)
	sink := remote.NewS3Sink(s.Client(), bucket, "out", remote.WithPartSize(remote.MinPartSize))
	files := map[string][]byte{"big.bin": randomBytes(2*remote.MinPartSize + 12345), "small.bin": randomBytes(100 << 10)}
	for name, data := range files {
		f, err := sink.Create(context.Background(), name, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeAll(t, f, data, 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range files {
		key := "out/" + name
		fsys := remote.NewS3FS(s.Client(), bucket)
		if ok, err := fsys.VerifyObject(context.Background(), key); !ok || err != nil {
			t.Fatalf("%s: VerifyObject %v %v", name, ok, err)
		}
		if st := fsys.Stats(); st.HEADs == 0 {
			t.Errorf("%s: no checksum asked: %+v", name, st)
		}
		flipBit(t, s, bucket, key, int64(len(data))-7)
		_, err := fs.ReadFile(remote.NewS3FS(s.Client(), bucket, remote.WithHeadSize(4<<10)), key)
		checksumErr(t, name+" read whole", err, "s3://"+bucket+"/"+key)
	}
}

// BenchmarkS3StoreChecksums reads a 64 MiB object stored with its CRC-32C
// through ReadRanges (8 MiB requests, 4 in flight), comparing it with the
// store's checksum or not: the ratio is what verification costs a read
// from a local server (the bytes pass through CRC-32C once more).
func BenchmarkS3StoreChecksums(b *testing.B) {
	s := needS3(b)
	bucket := s.NewBucket(b)
	data := randomBytes(64 << 20)
	_, err := s.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("obj"),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumCRC32C: aws.String(crcB64(data))})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, len(data))
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("verify=%v", on), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for range b.N {
				fsys := remote.NewS3FS(s.Client(), bucket, remote.WithStoreChecksums(on), remote.WithConcurrency(4))
				var g errgroup
				for off := 0; off < len(buf); off += 8 << 20 {
					g.Go(func() error {
						return fsys.ReadRanges(context.Background(), "obj", []source.Span{{Off: int64(off), Dst: buf[off : off+8<<20]}})
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// errgroup runs functions and returns the first error (no dependency for
// one benchmark).
type errgroup struct {
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

func (g *errgroup) Go(f func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(); err != nil {
			g.once.Do(func() { g.err = err })
		}
	}()
}

func (g *errgroup) Wait() error { g.wg.Wait(); return g.err }
