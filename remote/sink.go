package remote

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/sink"
)

func init() {
	sink.Register("s3", openS3Sink)
}

// openS3Sink opens an s3:// location for writing, with the client and
// options set for reading (SetS3Client, SetOptions) and SetSinkOptions'.
func openS3Sink(_ context.Context, location string) (sink.Sink, error) {
	loc, err := ParseLocation(location)
	if err != nil {
		return nil, err
	}
	if loc.Scheme != "s3" {
		return nil, &Error{Kind: ErrInvalid, Location: location, Msg: "not an s3:// location"}
	}
	client, _, opts := current()
	if client == nil {
		return nil, &Error{Kind: ErrInvalid, Location: location,
			Msg: "no S3 client: call remote.SetS3Client (the ckpt command builds one from the AWS environment)"}
	}
	sinkDefaults.RLock()
	sopts := sinkDefaults.opts
	sinkDefaults.RUnlock()
	return NewS3Sink(client, loc.Bucket, loc.Key, append(sopts, WithReadOptions(opts...))...), nil
}

var sinkDefaults struct {
	sync.RWMutex
	opts []SinkOption
}

// SetSinkOptions sets the options of the sinks opened for registered s3://
// locations (sink.Open: convert.Save, Run, SaveShard and Commit),
// replacing earlier ones.
func SetSinkOptions(opts ...SinkOption) {
	sinkDefaults.Lock()
	sinkDefaults.opts = append([]SinkOption(nil), opts...)
	sinkDefaults.Unlock()
}

// SinkOption configures an S3 sink (NewS3Sink).
type SinkOption func(*sinkOptions)

type sinkOptions struct {
	partSize    int64
	concurrency int
	read        []Option
}

// Defaults of the sink options.
const (
	DefaultPartSize          = 16 << 20
	DefaultUploadConcurrency = 4
	// MinPartSize is the smallest part S3 accepts (all parts but the last).
	MinPartSize = 5 << 20
	// MaxParts is the most parts of one multipart upload.
	MaxParts = 10000
)

// WithPartSize sets the size of the parts files are uploaded in (default
// 16 MiB, at least MinPartSize). A file has at most MaxParts parts, so
// the part size bounds the largest file: 16 MiB parts make 156 GiB.
func WithPartSize(n int64) SinkOption {
	return func(o *sinkOptions) { o.partSize = max(n, MinPartSize) }
}

// WithUploadConcurrency sets how many parts of one file are uploaded at
// once (default 4, at least 1). A file being written holds at most this
// many parts in memory, plus the one being filled and its first part
// (held until Close: see S3Sink).
func WithUploadConcurrency(n int) SinkOption {
	return func(o *sinkOptions) { o.concurrency = max(n, 1) }
}

// WithReadOptions sets the options of the file systems the sink reads its
// files back with (its FS method).
func WithReadOptions(opts ...Option) SinkOption {
	return func(o *sinkOptions) { o.read = append(o.read, opts...) }
}

// S3Sink writes files under a key prefix of a bucket: the sink.Sink
// that convert.Save, Run, SaveShard and Commit write s3:// locations with.
//
// A file is uploaded as a multipart upload, its parts (WithPartSize) sent
// as they fill, several at once (WithUploadConcurrency), each with its
// CRC-32C (x-amz-checksum-crc32c, which the server verifies); Close
// completes the upload, which makes the whole object appear at once. A
// file smaller than one part is sent with one PutObject, with its CRC-32C.
//
// The files are sink.Patchable: the first part stays in memory until
// Close, so that its bytes can be rewritten (WriteAt) after the rest was
// written, and is uploaded last, as part 1 (parts may be uploaded in any
// order). It is the part size, or the n bytes of Reserve when more (a
// safetensors header larger than a part, up to 5 GiB, S3's largest
// part), so that a writer that patches its header at the end (the
// checksums of package convert's shards) never finds it sent. A file of
// one PutObject is patched in its buffer before it is sent.
// An exclusive file is written with If-None-Match: *, so that it never
// replaces an object written by someone else meanwhile: the refusal (HTTP
// 412 or 409) is an *Error of kind ErrExists, which matches fs.ErrExist.
// A file that replaces a version seen earlier (CreateReplacing, with the
// ETag of Version) is written with If-Match: that ETag, and a refusal is
// ErrExists too: two writers replacing the same object never both win.
// On a failed upload, Abort, or a cancelled context, the multipart upload
// is aborted: no part is left behind. (A process killed in the middle of an
// upload cannot abort it: AbortUploads does, as convert.Save does for a
// checkpoint folder it takes over; a bucket lifecycle rule,
// AbortIncompleteMultipartUpload, removes the others.)
//
// Requests are retried by the client's retryer (the SDK's standard one by
// default). Build the client with NewS3Client, or pin
// RequestChecksumCalculation to WhenRequired yourself: the sink names
// CRC-32C explicitly on every upload.
type S3Sink struct {
	client *s3.Client
	bucket string
	key    string
	opts   sinkOptions
}

// NewS3Sink returns the sink of the folder key (a key prefix, "" for the
// bucket's root) of bucket, written with client.
func NewS3Sink(client *s3.Client, bucket, key string, opts ...SinkOption) *S3Sink {
	o := sinkOptions{partSize: DefaultPartSize, concurrency: DefaultUploadConcurrency}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return &S3Sink{client: client, bucket: bucket, key: strings.Trim(key, "/"), opts: o}
}

func (s *S3Sink) objectKey(name string) string {
	if s.key == "" {
		return name
	}
	return s.key + "/" + name
}

// Location returns s3://BUCKET/KEY of name.
func (s *S3Sink) Location(name string) string {
	if name == "" || name == "." {
		return Location{Scheme: "s3", Bucket: s.bucket, Key: s.key}.String()
	}
	return Location{Scheme: "s3", Bucket: s.bucket, Key: s.objectKey(name)}.String()
}

// FS returns the sink's folder for reading: a new file system of this
// package (what it lists and opens is not remembered from an earlier call).
func (s *S3Sink) FS() fs.FS {
	return &subFS{fsys: NewS3FS(s.client, s.bucket, s.opts.read...), dir: s.key}
}

// Remove deletes the object name (a missing object is not an error).
func (s *S3Sink) Remove(ctx context.Context, name string) error {
	if !fs.ValidPath(name) || name == "." {
		return &Error{Kind: ErrInvalid, Location: s.Location(name), Msg: "not a file name"}
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.objectKey(name))})
	if err != nil {
		if e := s3Err(err); !errors.Is(e, fs.ErrNotExist) {
			return s.wrap(name, e, "")
		}
	}
	return nil
}

// AbortUploads aborts the multipart uploads in progress of the objects
// under the folder dir ("" or "." for the whole sink) and returns how
// many it aborted: what writers killed in the middle of a file left (their
// parts are stored, and billed, until aborted). It is
// sink.UploadAborter's method: convert.Save calls it for a checkpoint folder it
// takes over from a killed save. An upload of a writer still running there
// is aborted too: its Close then fails.
func (s *S3Sink) AbortUploads(ctx context.Context, dir string) (int, error) {
	prefix := s.key
	if dir != "" && dir != "." {
		if !fs.ValidPath(dir) {
			return 0, &Error{Kind: ErrInvalid, Location: s.Location(dir), Msg: "not a folder name"}
		}
		prefix = s.objectKey(dir)
	}
	if prefix != "" {
		prefix += "/"
	}
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)}
	n := 0
	for {
		out, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return n, s.wrap(dir, s3Err(err), "listing the uploads in progress")
		}
		for _, u := range out.Uploads {
			_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s.bucket), Key: u.Key, UploadId: u.UploadId})
			if err != nil && !errors.Is(s3Err(err), fs.ErrNotExist) {
				return n, s.wrap(strings.TrimPrefix(aws.ToString(u.Key), s.key+"/"), s3Err(err), "aborting an upload")
			}
			n++
		}
		if !aws.ToBool(out.IsTruncated) || (aws.ToString(out.NextKeyMarker) == "" && aws.ToString(out.NextUploadIdMarker) == "") {
			return n, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// Create starts the upload of name (see S3Sink).
func (s *S3Sink) Create(ctx context.Context, name string, exclusive bool) (sink.File, error) {
	return s.create(ctx, name, exclusive, "")
}

// Version returns the ETag of the object name, as HeadObject reports it
// now; a missing object is an *Error of kind ErrNotFound (fs.ErrNotExist).
func (s *S3Sink) Version(ctx context.Context, name string) (string, error) {
	if !fs.ValidPath(name) || name == "." {
		return "", &Error{Kind: ErrInvalid, Location: s.Location(name), Msg: "not a file name"}
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.objectKey(name))})
	if err != nil {
		return "", s.wrap(name, s3Err(err), "")
	}
	if aws.ToString(out.ETag) == "" {
		return "", &Error{Kind: ErrRequest, Location: s.Location(name), Msg: "the server sent no ETag"}
	}
	return aws.ToString(out.ETag), nil
}

// CreateReplacing starts the upload of name that replaces the object of
// ETag version (Version's): its PutObject or CompleteMultipartUpload
// carries If-Match: version, so that Close fails, and nothing is
// replaced, when the object was replaced or removed since (HTTP 412, or
// 404 for a removed one): an *Error of kind ErrExists, which matches
// fs.ErrExist. On a store that ignores If-Match the object is replaced
// unconditionally (versitygw v1.8.0 and AWS S3 honour it).
func (s *S3Sink) CreateReplacing(ctx context.Context, name, version string) (sink.File, error) {
	if version == "" {
		return nil, &Error{Kind: ErrRequest, Location: s.Location(name), Msg: "no version to replace"}
	}
	return s.create(ctx, name, false, version)
}

func (s *S3Sink) create(ctx context.Context, name string, exclusive bool, ifMatch string) (sink.File, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, &Error{Kind: ErrInvalid, Location: s.Location(name), Msg: "not a file name"}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return &upload{s: s, name: name, key: s.objectKey(name), exclusive: exclusive, ifMatch: ifMatch, ctx: ctx, cancel: cancel,
		next: 1, sem: make(chan struct{}, s.opts.concurrency), spare: make(chan []byte, s.opts.concurrency)}, nil
}

// wrap names the location of an error of the client.
func (s *S3Sink) wrap(name string, err error, msg string) error {
	var e *Error
	if errors.As(err, &e) {
		e2 := *e
		if e2.Location == "" {
			e2.Location = s.Location(name)
		}
		if msg != "" {
			e2.Msg = strings.TrimPrefix(e2.Msg+"; "+msg, "; ")
		}
		return &e2
	}
	return &Error{Kind: ErrRequest, Location: s.Location(name), Msg: msg, Err: err}
}

// crc32cBase64 is a checksum as S3 headers carry it: the big-endian bytes
// of the CRC, in base64.
func crc32cBase64(b []byte) string {
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], safetensors.Checksum(b))
	return base64.StdEncoding.EncodeToString(c[:])
}

// upload is a file being written to an S3Sink.
type upload struct {
	s         *S3Sink
	name, key string
	exclusive bool
	ifMatch   string // the ETag the object must still have (CreateReplacing)
	ctx       context.Context
	cancel    context.CancelFunc

	head     []byte      // part 1, held until Close (rewritable: WriteAt)
	reserve  int64       // the bytes part 1 holds at least (Reserve)
	buf      []byte      // the part being filled
	spare    chan []byte // buffers of parts sent, for the next parts
	id       string      // the multipart upload, once started
	next     int32       // the last part number used (1: the head's)
	sem      chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	parts    []types.CompletedPart
	err      error // the first failure
	finished bool
	etag     string // the version Close wrote
}

func (u *upload) fail(err error) {
	u.mu.Lock()
	if u.err == nil {
		u.err = err
		u.cancel() // the parts in flight
	}
	u.mu.Unlock()
}

func (u *upload) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// stopped returns why the upload cannot go on: its first failure, or the
// cancellation of its context; nil while it can.
func (u *upload) stopped() error {
	if err := u.failed(); err != nil {
		return err
	}
	return u.ctx.Err()
}

// maxPartSize is the largest part S3 accepts.
const maxPartSize = 5 << 30

// Reserve makes the first part, held until Close, at least n bytes: they
// can be rewritten with WriteAt until then. It must come before the first
// Write; n is at most 5 GiB, S3's largest part.
func (u *upload) Reserve(n int64) error {
	switch {
	case u.finished:
		return &Error{Kind: ErrRequest, Location: u.s.Location(u.name), Msg: "Reserve after Close or Abort"}
	case u.head != nil:
		return &Error{Kind: ErrRequest, Location: u.s.Location(u.name), Msg: "Reserve after the first Write"}
	case n > maxPartSize:
		return &Error{Kind: ErrRequest, Location: u.s.Location(u.name), Msg: fmt.Sprintf("cannot hold %d bytes in the first part: S3's largest part is %d", n, int64(maxPartSize))}
	}
	u.reserve = max(n, 0)
	return nil
}

// WriteAt rewrites bytes of the first part, which is held until Close;
// bytes beyond it (already sent, or not written yet) are an error.
func (u *upload) WriteAt(p []byte, off int64) (int, error) {
	if u.finished {
		return 0, &Error{Kind: ErrRequest, Location: u.s.Location(u.name), Msg: "write after Close or Abort"}
	}
	if off < 0 || off+int64(len(p)) > int64(len(u.head)) {
		return 0, &Error{Kind: ErrRequest, Location: u.s.Location(u.name),
			Msg: fmt.Sprintf("cannot rewrite bytes %d to %d: only the first part, %d bytes written so far, is held until Close (sink.Patchable.Reserve)", off, off+int64(len(p)), len(u.head))}
	}
	return copy(u.head[off:], p), nil
}

// Write buffers p into parts: the first, held until Close, then the
// others, each sent once full.
func (u *upload) Write(p []byte) (int, error) {
	if u.finished {
		return 0, &Error{Kind: ErrRequest, Location: u.s.Location(u.name), Msg: "write after Close or Abort"}
	}
	n := 0
	for len(p) > 0 {
		if err := u.stopped(); err != nil {
			return n, err
		}
		if u.head == nil {
			u.head = make([]byte, 0, max(u.s.opts.partSize, u.reserve))
		}
		if len(u.head) < cap(u.head) {
			k := min(len(p), cap(u.head)-len(u.head))
			u.head = append(u.head, p[:k]...)
			p, n = p[k:], n+k
			continue
		}
		if u.buf == nil {
			select {
			case u.buf = <-u.spare:
			default:
				u.buf = make([]byte, 0, u.s.opts.partSize)
			}
		}
		k := min(len(p), cap(u.buf)-len(u.buf))
		u.buf = append(u.buf, p[:k]...)
		p, n = p[k:], n+k
		if len(u.buf) == cap(u.buf) {
			if err := u.sendPart(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// sendPart starts the upload of the full buffer as the next part,
// waiting while WithUploadConcurrency parts are in flight.
func (u *upload) sendPart() error {
	if err := u.start(); err != nil {
		return err
	}
	if u.next >= MaxParts {
		err := &Error{Kind: ErrRequest, Location: u.s.Location(u.name),
			Msg: fmt.Sprintf("more than %d parts of %d bytes: use a larger part size (remote.WithPartSize)", MaxParts, u.s.opts.partSize)}
		u.fail(err)
		return err
	}
	u.next++
	num, body := u.next, u.buf
	u.buf = nil
	return u.uploadPart(num, body, true)
}

// start starts the multipart upload, once.
func (u *upload) start() error {
	if u.id == "" {
		in := &s3.CreateMultipartUploadInput{Bucket: aws.String(u.s.bucket), Key: aws.String(u.key),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c}
		out, err := u.s.client.CreateMultipartUpload(u.ctx, in)
		if err != nil {
			err = u.s.wrap(u.name, s3Err(err), "starting the multipart upload")
			u.fail(err)
			return err
		}
		u.id = aws.ToString(out.UploadId)
	}
	return nil
}

// uploadPart starts the upload of body as part num, waiting while
// WithUploadConcurrency parts are in flight; recycle hands body to the
// next parts once sent.
func (u *upload) uploadPart(num int32, body []byte, recycle bool) error {
	select {
	case u.sem <- struct{}{}:
	case <-u.ctx.Done():
		return u.stopped()
	}
	u.wg.Add(1)
	go func() {
		defer func() { <-u.sem; u.wg.Done() }()
		sum := crc32cBase64(body)
		out, err := u.s.client.UploadPart(u.ctx, &s3.UploadPartInput{
			Bucket: aws.String(u.s.bucket), Key: aws.String(u.key), UploadId: aws.String(u.id),
			PartNumber: aws.Int32(num), Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumCRC32C: aws.String(sum),
		})
		if err != nil {
			u.fail(u.s.wrap(u.name, s3Err(err), fmt.Sprintf("uploading part %d", num)))
			return
		}
		if recycle {
			select {
			case u.spare <- body[:0]: // the client is done with it
			default:
			}
		}
		u.mu.Lock()
		u.parts = append(u.parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num), ChecksumCRC32C: aws.String(sum)})
		u.mu.Unlock()
	}()
	return nil
}

// Close sends what is left and completes the upload: the object appears
// whole. On failure the upload is aborted.
func (u *upload) Close() error {
	if u.finished {
		return &Error{Kind: ErrRequest, Location: u.s.Location(u.name), Msg: "Close after Close or Abort"}
	}
	err := u.complete()
	u.finished = true
	if err != nil {
		u.abort()
		return err
	}
	u.head, u.buf, u.spare = nil, nil, nil // every part is sent: nothing reads them now
	u.cancel()
	return nil
}

// Version returns the ETag of the object Close wrote ("" before a
// successful Close, or when the store returned none): the version a
// later CreateReplacing of the same name replaces (sink.Written).
func (u *upload) Version() string { return u.etag }

func (u *upload) complete() error {
	if err := u.stopped(); err != nil {
		return err
	}
	if u.id == "" {
		// One part or a little more: a single PutObject.
		body := u.head
		if len(u.buf) > 0 {
			body = append(body, u.buf...)
		}
		in := &s3.PutObjectInput{Bucket: aws.String(u.s.bucket), Key: aws.String(u.key),
			Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumCRC32C: aws.String(crc32cBase64(body))}
		if u.exclusive {
			in.IfNoneMatch = aws.String("*")
		}
		if u.ifMatch != "" {
			in.IfMatch = aws.String(u.ifMatch)
		}
		out, err := u.s.client.PutObject(u.ctx, in)
		if err != nil {
			return u.putErr(err)
		}
		u.etag = aws.ToString(out.ETag)
		return nil
	}
	if len(u.buf) > 0 {
		if err := u.sendPart(); err != nil {
			return err
		}
	}
	// The first part last: its bytes may have been rewritten until now.
	if err := u.uploadPart(1, u.head, false); err != nil {
		return err
	}
	u.wg.Wait()
	if err := u.stopped(); err != nil {
		return err
	}
	parts := append([]types.CompletedPart(nil), u.parts...)
	sortParts(parts)
	in := &s3.CompleteMultipartUploadInput{Bucket: aws.String(u.s.bucket), Key: aws.String(u.key), UploadId: aws.String(u.id),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}
	if u.exclusive {
		in.IfNoneMatch = aws.String("*")
	}
	if u.ifMatch != "" {
		in.IfMatch = aws.String(u.ifMatch)
	}
	out, err := u.s.client.CompleteMultipartUpload(u.ctx, in)
	if err != nil {
		return u.putErr(err)
	}
	u.etag = aws.ToString(out.ETag)
	u.id = "" // completed: nothing to abort
	return nil
}

// putErr classifies the failure of the request that makes the object
// appear: a refused If-None-Match or If-Match is ErrExists.
func (u *upload) putErr(err error) error {
	e := s3Err(err)
	var re *Error
	if u.exclusive && errors.As(e, &re) && (re.Status == 412 || re.Status == 409) {
		return &Error{Kind: ErrExists, Location: u.s.Location(u.name), Status: re.Status,
			Msg: "an object of this name was written meanwhile (If-None-Match: * refused)", Err: err}
	}
	if u.ifMatch != "" && errors.As(e, &re) && (re.Status == 412 || re.Status == 409 || re.Kind == ErrNotFound && !isNoSuchBucket(err)) {
		return &Error{Kind: ErrExists, Location: u.s.Location(u.name), Status: re.Status,
			Msg: "the object was replaced or removed since the writer saw ETag " + u.ifMatch + " (If-Match refused)", Err: err}
	}
	return u.s.wrap(u.name, e, "")
}

// isNoSuchBucket reports whether an error of the client is a missing bucket.
func isNoSuchBucket(err error) bool {
	var ec interface{ ErrorCode() string }
	return errors.As(err, &ec) && ec.ErrorCode() == "NoSuchBucket"
}

func sortParts(ps []types.CompletedPart) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && aws.ToInt32(ps[j].PartNumber) < aws.ToInt32(ps[j-1].PartNumber); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// Abort stops the parts in flight and aborts the multipart upload.
func (u *upload) Abort() error {
	if u.finished && u.id == "" {
		return nil
	}
	u.finished = true
	return u.abort()
}

func (u *upload) abort() error {
	u.cancel()
	u.wg.Wait()
	u.head, u.buf, u.spare = nil, nil, nil
	if u.id == "" {
		return nil
	}
	// The caller's context may be the cancelled one: the abort gets its own.
	// A part the server was still receiving when the upload was aborted
	// can outlive the abort (S3 documents it: abort again until ListParts
	// finds no upload).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), time.Minute)
	defer cancel()
	var err error
	for i := 0; i < 8; i++ {
		if i > 0 {
			select {
			case <-time.After(time.Duration(25<<i) * time.Millisecond):
			case <-ctx.Done():
			}
		}
		_, err = u.s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(u.s.bucket), Key: aws.String(u.key), UploadId: aws.String(u.id)})
		if err != nil && !errors.Is(s3Err(err), fs.ErrNotExist) {
			continue
		}
		_, err = u.s.client.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String(u.s.bucket), Key: aws.String(u.key), UploadId: aws.String(u.id), MaxParts: aws.Int32(1)})
		if err != nil && errors.Is(s3Err(err), fs.ErrNotExist) {
			u.id = ""
			return nil
		}
		if err == nil {
			err = errors.New("the upload still has parts after it was aborted")
		}
	}
	return u.s.wrap(u.name, s3Err(err), "aborting the multipart upload "+u.id)
}

// subFS is the folder dir of an FS, with its Stat and ReadDir.
type subFS struct {
	fsys *FS
	dir  string
}

func (s *subFS) full(name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if s.dir == "" {
		return name, nil
	}
	return path.Join(s.dir, name), nil
}

func (s *subFS) Open(name string) (fs.File, error) {
	full, err := s.full(name)
	if err != nil {
		return nil, err
	}
	return s.fsys.Open(full)
}

func (s *subFS) Stat(name string) (fs.FileInfo, error) {
	full, err := s.full(name)
	if err != nil {
		return nil, err
	}
	return s.fsys.Stat(full)
}

func (s *subFS) ReadDir(name string) ([]fs.DirEntry, error) {
	full, err := s.full(name)
	if err != nil {
		return nil, err
	}
	return s.fsys.ReadDir(full)
}

var (
	_ sink.Conditional = (*S3Sink)(nil)
	_ sink.Patchable   = (*upload)(nil)
)
