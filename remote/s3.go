package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// NewS3FS returns the file system of one bucket read through client: names
// are object keys (a folder is a key prefix ending at a '/'). Requests are
// made with the client's credentials, region and endpoint; retries are this
// package's (WithRetries), not the client's, so that a read broken in the
// middle resumes where it stopped.
func NewS3FS(client *s3.Client, bucket string, opts ...Option) *FS {
	return newFS(&s3Backend{client: client, bucket: bucket}, opts)
}

// NewS3Client returns an S3 client for cfg (credentials and region, from
// config.LoadDefaultConfig in a program), with the settings S3-compatible
// stores need: endpoint as its base endpoint when not empty, path-style
// addressing when pathStyle is set, and request checksums only where the
// API requires them (RequestChecksumCalculation WhenRequired: the SDK's
// default, WhenSupported, breaks multipart uploads on some S3-compatible
// servers). The SDK's default HTTP client keeps up to 64 idle connections
// per host, so that parallel ranged reads reuse theirs (its default, 10,
// is below this package's default concurrency); another client in cfg is
// left as it is.
func NewS3Client(cfg aws.Config, endpoint string, pathStyle bool) *s3.Client {
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok || cfg.HTTPClient == nil {
		if bc == nil {
			bc = awshttp.NewBuildableClient()
		}
		cfg.HTTPClient = bc.WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = max(tr.MaxIdleConnsPerHost, maxIdlePerHost)
			tr.MaxIdleConns = max(tr.MaxIdleConns, 4*maxIdlePerHost)
		})
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = pathStyle
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
}

// PathStyle reports whether an endpoint needs path-style addressing
// (http://host/bucket/key rather than http://bucket.host/key): when its
// host is an IP address or localhost. A store that needs it under a host
// name is the caller's to know: pass true to NewS3Client (the ckpt command
// does when CKPT_S3_PATH_STYLE=1; this package reads no environment).
func PathStyle(endpoint string) bool {
	if endpoint == "" {
		return false
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	host := u.Hostname()
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil
}

// listPageSize is the MaxKeys of listings; 0 leaves the server's default
// (tests set it).
var listPageSize atomic.Int32

// maxIdlePerHost is how many idle connections to a host the clients this
// package builds keep.
const maxIdlePerHost = 64

type s3Backend struct {
	client *s3.Client
	bucket string
}

func (b *s3Backend) where(name string) string {
	if name == "." || name == "" {
		return "s3://" + b.bucket
	}
	return "s3://" + b.bucket + "/" + name
}

func (b *s3Backend) canList() bool { return true }

// ownRetries turns the client's retries off for one call: this package
// retries (and resumes broken bodies) itself.
func ownRetries(o *s3.Options) { o.Retryer = aws.NopRetryer{} }

func (b *s3Backend) get(ctx context.Context, name string, off, n int64, pin *version) (io.ReadCloser, response, error) {
	in := &s3.GetObjectInput{
		Bucket: aws.String(b.bucket),
		Key:    aws.String(name),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)),
	}
	if pin != nil && pin.etag != "" {
		in.IfMatch = aws.String(pin.etag)
	}
	out, err := b.client.GetObject(ctx, in, ownRetries)
	if err != nil {
		return nil, response{}, s3Err(err)
	}
	r := response{version: version{size: -1, etag: aws.ToString(out.ETag)}}
	if out.LastModified != nil {
		r.modTime = *out.LastModified
	}
	length := aws.ToInt64(out.ContentLength)
	if cr := aws.ToString(out.ContentRange); cr != "" {
		first, last, size, ok := parseContentRange(cr)
		if !ok {
			out.Body.Close()
			return nil, response{}, &Error{Kind: ErrRequest, Msg: fmt.Sprintf("malformed Content-Range %q", cr)}
		}
		r.first, r.n, r.size = first, last-first+1, size
		if out.ContentLength != nil && length != r.n {
			out.Body.Close()
			return nil, response{}, &Error{Kind: ErrRequest, Msg: fmt.Sprintf("Content-Length %d does not match Content-Range %q", length, cr)}
		}
	} else {
		// No Content-Range: the whole object.
		r.first, r.n, r.size, r.whole = 0, length, length, true
	}
	return out.Body, r, nil
}

func (b *s3Backend) head(ctx context.Context, name string) (version, error) {
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(name)}, ownRetries)
	if err != nil {
		return version{}, s3Err(err)
	}
	v := version{size: aws.ToInt64(out.ContentLength), etag: aws.ToString(out.ETag)}
	if out.LastModified != nil {
		v.modTime = *out.LastModified
	}
	return v, nil
}

func (b *s3Backend) list(ctx context.Context, dir string, page func()) ([]dirEntry, error) {
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	in := &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(prefix), Delimiter: aws.String("/")}
	if n := listPageSize.Load(); n > 0 {
		in.MaxKeys = aws.Int32(n)
	}
	var out []dirEntry
	for {
		page()
		resp, err := b.client.ListObjectsV2(ctx, in, ownRetries)
		if err != nil {
			return nil, s3Err(err)
		}
		for _, o := range resp.Contents {
			base, ok := strings.CutPrefix(aws.ToString(o.Key), prefix)
			if !ok || !validBase(base) {
				continue // the folder's own marker object, or a key that is no file name
			}
			e := dirEntry{name: base, size: aws.ToInt64(o.Size)}
			if o.LastModified != nil {
				e.modTime = *o.LastModified
			}
			out = append(out, e)
		}
		for _, p := range resp.CommonPrefixes {
			base, ok := strings.CutPrefix(aws.ToString(p.Prefix), prefix)
			base = strings.TrimSuffix(base, "/")
			if !ok || !validBase(base) {
				continue
			}
			out = append(out, dirEntry{name: base, dir: true})
		}
		if !aws.ToBool(resp.IsTruncated) || resp.NextContinuationToken == nil {
			return out, nil
		}
		in.ContinuationToken = resp.NextContinuationToken
	}
}

// validBase reports whether a listed name can be a file name of an fs.FS.
func validBase(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.Contains(s, "/")
}

// s3Err classifies an error of the S3 client.
func s3Err(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	status := 0
	var sc interface{ HTTPStatusCode() int }
	if errors.As(err, &sc) {
		status = sc.HTTPStatusCode()
	}
	code := ""
	var ec interface{ ErrorCode() string }
	if errors.As(err, &ec) {
		code = ec.ErrorCode()
	}
	return classify(status, code, err)
}

// classify maps an HTTP status and an S3 error code to a kind.
func classify(status int, code string, err error) *Error {
	e := &Error{Status: status, Err: err}
	switch {
	case status == 0:
		// No response: the connection failed.
		e.Kind, e.retry = ErrUnavailable, true
	case status == 404 || status == 410 || code == "NoSuchKey" || code == "NotFound" || code == "NoSuchBucket":
		e.Kind = ErrNotFound
	case status == 412 || code == "PreconditionFailed":
		e.Kind, e.Msg = ErrChanged, "the object was replaced since it was opened (If-Match failed)"
	case status == 416 || code == "InvalidRange":
		e.Kind, e.Msg = ErrRequest, "range not satisfiable: the object is shorter than asked"
	case status == 401 || status == 403:
		e.Kind, e.Msg = ErrRequest, "access denied"
	case status == 429 || status >= 500 || code == "SlowDown" || code == "Throttling" || code == "RequestTimeout" || code == "InternalError":
		e.Kind, e.retry = ErrUnavailable, true
	default:
		e.Kind = ErrRequest
	}
	return e
}

// parseContentRange parses "bytes FIRST-LAST/SIZE".
func parseContentRange(s string) (first, last, size int64, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "bytes ")
	if !ok {
		return 0, 0, 0, false
	}
	rng, total, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, false
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, 0, false
	}
	var err1, err2, err3 error
	first, err1 = strconv.ParseInt(a, 10, 64)
	last, err2 = strconv.ParseInt(b, 10, 64)
	size, err3 = strconv.ParseInt(total, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || first < 0 || last < first || size <= last {
		return 0, 0, 0, false
	}
	return first, last, size, true
}

// maxProbedParts is the most parts of a composite checksum whose
// boundaries are asked one HeadObject each (where the store does not list
// them): an object of more parts is not verified there.
const maxProbedParts = 1000

// checksum asks for the CRC-32C the store holds of name's pinned version:
// HeadObject with ChecksumMode ENABLED and If-Match (a store that refuses
// it, with 403 or another 4xx than 404 and 412, holds none as far as this
// package knows). For a COMPOSITE
// checksum it also needs the parts' boundaries: GetObjectAttributes
// ObjectParts (with the parts' own CRCs, where the store lists them), else
// HeadObject with PartNumber for each part, conc at a time.
func (b *s3Backend) checksum(ctx context.Context, name string, pin version, conc int, count func()) (*storeSum, error) {
	in := &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(name), ChecksumMode: types.ChecksumModeEnabled}
	if pin.etag != "" {
		in.IfMatch = aws.String(pin.etag)
	}
	count()
	out, err := b.client.HeadObject(ctx, in, ownRetries)
	if err != nil {
		e := s3Err(err)
		var re *Error
		if errors.As(e, &re) && re.Kind == ErrRequest {
			// A store (or a policy) that does not answer this: the
			// object reads as before, unverified.
			return nil, nil
		}
		return nil, e
	}
	got := version{size: -1, etag: aws.ToString(out.ETag)}
	if out.ContentLength != nil {
		got.size = *out.ContentLength
	}
	if err := checkVersion(pin, got); err != nil {
		return nil, err
	}
	sum, n, ok := parseStoreSum(aws.ToString(out.ChecksumCRC32C), string(out.ChecksumType))
	if !ok {
		return nil, nil // no CRC-32C (or one this package cannot read): nothing to compare
	}
	sum.versionID = aws.ToString(out.VersionId)
	if n == 0 {
		return sum, nil
	}
	if n == 1 {
		sum.ends = []int64{pin.size}
		return sum, nil
	}
	ends, parts, ok, err := b.listedParts(ctx, name, pin, n, count)
	if err != nil {
		return nil, err
	}
	if !ok {
		if ends, err = b.probeParts(ctx, name, pin, n, conc, count); err != nil || ends == nil {
			return nil, err
		}
	}
	sum.ends, sum.parts = ends, parts
	return sum, nil
}

// listedParts returns the part boundaries (each part's end) of name's
// version pin, of n parts, from GetObjectAttributes ObjectParts, and the
// parts' CRC-32Cs when every part has one; ok is false when the store does
// not list them (an error of the request other than a retryable one, a
// change or a missing object means that too).
func (b *s3Backend) listedParts(ctx context.Context, name string, pin version, n int, count func()) (ends []int64, sums []uint32, ok bool, err error) {
	in := &s3.GetObjectAttributesInput{Bucket: aws.String(b.bucket), Key: aws.String(name),
		ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesEtag, types.ObjectAttributesObjectParts},
		MaxParts:         aws.Int32(1000)}
	allSums := true
	for {
		count()
		out, err := b.client.GetObjectAttributes(ctx, in, ownRetries)
		if err != nil {
			e := s3Err(err)
			var re *Error
			if !errors.As(e, &re) || re.Kind == ErrNotFound || (re.retry && re.Status != http.StatusNotImplemented) {
				return nil, nil, false, e
			}
			return nil, nil, false, nil // not supported or not allowed
		}
		if etag := aws.ToString(out.ETag); pin.etag != "" && etag != "" && strings.Trim(etag, `"`) != strings.Trim(pin.etag, `"`) {
			return nil, nil, false, &Error{Kind: ErrChanged, Msg: "the object was replaced: ETag " + etag + ", was " + pin.etag + " when it was opened"}
		}
		op := out.ObjectParts
		if op == nil || len(op.Parts) == 0 || int(aws.ToInt32(op.TotalPartsCount)) != n {
			return nil, nil, false, nil
		}
		for _, p := range op.Parts {
			size := aws.ToInt64(p.Size)
			if int(aws.ToInt32(p.PartNumber)) != len(ends)+1 || size <= 0 || len(ends) >= n {
				return nil, nil, false, nil
			}
			var last int64
			if len(ends) > 0 {
				last = ends[len(ends)-1]
			}
			ends = append(ends, last+size)
			crc, ok := parseCRCBase64(aws.ToString(p.ChecksumCRC32C))
			allSums = allSums && ok
			sums = append(sums, crc)
		}
		if !aws.ToBool(op.IsTruncated) || op.NextPartNumberMarker == nil {
			break
		}
		in.PartNumberMarker = op.NextPartNumberMarker
	}
	if len(ends) != n || ends[n-1] != pin.size {
		return nil, nil, false, nil
	}
	if !allSums {
		sums = nil
	}
	return ends, sums, true, nil
}

// probeParts returns the part boundaries of name's version pin, of n
// parts, asking HeadObject with PartNumber (the part's Content-Range) for
// each, conc at a time; nil when there are too many parts or the answers
// do not tile the object.
func (b *s3Backend) probeParts(ctx context.Context, name string, pin version, n, conc int, count func()) ([]int64, error) {
	if n > maxProbedParts {
		return nil, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	starts, ends := make([]int64, n), make([]int64, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(max(conc, 1), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1))
				if i > n {
					return
				}
				in := &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(name), PartNumber: aws.Int32(int32(i))}
				if pin.etag != "" {
					in.IfMatch = aws.String(pin.etag)
				}
				count()
				out, err := b.client.HeadObject(ctx, in, ownRetries)
				if err != nil {
					cancel(s3Err(err))
					return
				}
				first, last, size, ok := parseContentRange(aws.ToString(out.ContentRange))
				if !ok || size != pin.size || int(aws.ToInt32(out.PartsCount)) != n {
					first, last = -1, -1
				}
				starts[i-1], ends[i-1] = first, last+1
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	for i := range n {
		if starts[i] < 0 || (i == 0 && starts[i] != 0) || (i > 0 && starts[i] != ends[i-1]) {
			return nil, nil
		}
	}
	if ends[n-1] != pin.size {
		return nil, nil
	}
	return ends, nil
}
