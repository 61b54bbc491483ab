package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NewHTTPFS returns the file system of the files under base, an http or
// https URL (a folder: names are paths below it), read with client (nil: a
// client of this package's, http.DefaultTransport's settings keeping up
// to 64 idle connections per host for parallel ranged reads). The server must answer ranged GETs (206 Partial
// Content): a file larger than the first read that comes back whole (200)
// fails with ErrRequest. Versions are pinned with If-Match on a strong
// ETag, or else with If-Unmodified-Since on Last-Modified, and every
// response's validators are compared with the pinned ones; a server that
// sends neither leaves only the file's size to compare (and such files
// are not cached). Folders cannot
// be listed (ErrInvalid): HTTP sources take files and indexes, whose
// shards are found beside them.
func NewHTTPFS(client *http.Client, base string, opts ...Option) (*FS, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, &Error{Kind: ErrInvalid, Location: base, Msg: "not an http(s)://HOST[/PATH] URL without query, fragment or credentials"}
	}
	if client == nil {
		client = defaultHTTPClient()
	}
	b := &httpBackend{client: client, scheme: u.Scheme, host: u.Host, prefix: strings.Trim(u.Path, "/"), query: map[string]string{}}
	return newFS(b, opts), nil
}

// defaultHTTPClient is the client of NewHTTPFS without one.
var defaultHTTPClient = sync.OnceValue(func() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = maxIdlePerHost
	tr.MaxIdleConns = 4 * maxIdlePerHost
	return &http.Client{Transport: tr}
})

type httpBackend struct {
	client       *http.Client
	scheme, host string
	prefix       string            // path below the host, without slashes around
	query        map[string]string // name → the query of the location that named it (a presigned URL)
}

// withQuery keeps the query of the URL that named name (a presigned URL's
// signature) for that name only.
func (b *httpBackend) withQuery(name, rawQuery string) {
	if rawQuery != "" {
		b.query[name] = rawQuery
	}
}

func (b *httpBackend) url(name string) string {
	p := b.prefix
	if name != "." && name != "" {
		p = strings.TrimPrefix(p+"/"+name, "/")
	}
	u := url.URL{Scheme: b.scheme, Host: b.host, Path: "/" + p, RawQuery: b.query[name]}
	return u.String()
}

func (b *httpBackend) where(name string) string {
	u := url.URL{Scheme: b.scheme, Host: b.host, Path: "/" + strings.TrimPrefix(b.prefix+"/"+strings.TrimPrefix(name, "."), "/")}
	return strings.TrimSuffix(u.String(), "/")
}

func (b *httpBackend) canList() bool { return false }

func (b *httpBackend) list(context.Context, string, func()) ([]dirEntry, error) {
	return nil, &Error{Kind: ErrInvalid, Msg: "plain HTTP cannot list a folder: name a file (.safetensors) or an index (.json)"}
}

// checksum: plain HTTP servers state no checksum of a file's bytes.
func (b *httpBackend) checksum(context.Context, string, version, int, func()) (*storeSum, error) {
	return nil, nil
}

func (b *httpBackend) request(ctx context.Context, method, name string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, b.url(name), nil)
	if err != nil {
		return nil, &Error{Kind: ErrInvalid, Msg: "invalid location", Err: err}
	}
	req.Header.Set("Accept-Encoding", "identity")
	return req, nil
}

func (b *httpBackend) get(ctx context.Context, name string, off, n int64, pin *version) (io.ReadCloser, response, error) {
	req, err := b.request(ctx, http.MethodGet, name)
	if err != nil {
		return nil, response{}, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	if pin != nil {
		switch {
		case pin.etag != "" && !strings.HasPrefix(pin.etag, "W/"):
			req.Header.Set("If-Match", pin.etag)
		case !pin.modTime.IsZero():
			req.Header.Set("If-Unmodified-Since", pin.modTime.UTC().Format(http.TimeFormat))
		}
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, response{}, httpTransportErr(err)
	}
	r := response{version: respVersion(resp)}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		cr := resp.Header.Get("Content-Range")
		first, last, size, ok := parseContentRange(cr)
		if !ok {
			resp.Body.Close()
			return nil, response{}, &Error{Kind: ErrRequest, Status: resp.StatusCode, Msg: fmt.Sprintf("malformed Content-Range %q", cr)}
		}
		r.first, r.n, r.size = first, last-first+1, size
		if resp.ContentLength >= 0 && resp.ContentLength != r.n {
			resp.Body.Close()
			return nil, response{}, &Error{Kind: ErrRequest, Status: resp.StatusCode, Msg: fmt.Sprintf("Content-Length %d does not match Content-Range %q", resp.ContentLength, cr)}
		}
	case http.StatusOK:
		// Range ignored: the whole file. Acceptable only when it is what
		// was asked for (the caller checks); its length must be known.
		if resp.ContentLength < 0 {
			resp.Body.Close()
			return nil, response{}, &Error{Kind: ErrRequest, Status: resp.StatusCode,
				Msg: "the server ignores Range requests and does not say the file's length; serve it with range support"}
		}
		r.first, r.n, r.size, r.whole = 0, resp.ContentLength, resp.ContentLength, true
	default:
		resp.Body.Close()
		return nil, response{}, httpStatusErr(resp)
	}
	return resp.Body, r, nil
}

func (b *httpBackend) head(ctx context.Context, name string) (version, error) {
	req, err := b.request(ctx, http.MethodHead, name)
	if err != nil {
		return version{}, err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return version{}, httpTransportErr(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return version{}, httpStatusErr(resp)
	}
	v := respVersion(resp)
	v.size = resp.ContentLength
	if v.size < 0 {
		return version{}, &Error{Kind: ErrRequest, Status: resp.StatusCode, Msg: "HEAD does not say the file's length"}
	}
	return v, nil
}

func respVersion(resp *http.Response) version {
	v := version{size: -1, etag: resp.Header.Get("ETag")}
	if lm := resp.Header.Get("Last-Modified"); lm != "" {
		if t, err := http.ParseTime(lm); err == nil {
			v.modTime = t
		}
	}
	return v
}

func httpTransportErr(err error) error {
	if ctxErr := contextErr(err); ctxErr != nil {
		return ctxErr
	}
	return &Error{Kind: ErrUnavailable, Err: err, retry: true}
}

// contextErr returns the context error err wraps, if any.
func contextErr(err error) error {
	for _, target := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, target) {
			return target
		}
	}
	return nil
}

func httpStatusErr(resp *http.Response) error {
	e := classify(resp.StatusCode, "", nil)
	if ra := resp.Header.Get("Retry-After"); ra != "" && e.retry {
		if s, err := strconv.Atoi(ra); err == nil && s >= 0 {
			e.Msg = "Retry-After " + (time.Duration(s) * time.Second).String()
		}
	}
	return e
}
