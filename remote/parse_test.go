package remote

import (
	"errors"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

func TestParseLocation(t *testing.T) {
	for in, want := range map[string]Location{
		"s3://bucket":                          {Scheme: "s3", Bucket: "bucket"},
		"s3://bucket/":                         {Scheme: "s3", Bucket: "bucket"},
		"S3://my.bucket-1/org/model/":          {Scheme: "s3", Bucket: "my.bucket-1", Key: "org/model"},
		"s3://b_b/a/model.safetensors":         {Scheme: "s3", Bucket: "b_b", Key: "a/model.safetensors"},
		"https://host:8443/a/b.json?sig=1&x":   {Scheme: "https", Host: "host:8443", Key: "a/b.json", RawQuery: "sig=1&x"},
		"http://127.0.0.1/m%20x.safetensors":   {Scheme: "http", Host: "127.0.0.1", Key: "m x.safetensors"},
		"https://huggingface.co/org/m/resolve": {Scheme: "https", Host: "huggingface.co", Key: "org/m/resolve"},
	} {
		got, err := ParseLocation(in)
		if err != nil || got != want {
			t.Errorf("ParseLocation(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "bucket/key", "s3://", "s3://ab", "s3://UPPER CASE", "s3://b/../x", "s3://bkt//x", "s3://bkt/./x",
		"s3://bkt/x?y", "ftp://host/x", "https:///x", "https://user:pw@host/x", "https://host/x#frag", "https://host/a/../b"} {
		// The location refused, named: not another invalid request.
		var re *Error
		if _, err := ParseLocation(bad); !errors.Is(err, ErrInvalid) || !errors.As(err, &re) || re.Location != bad || re.Msg == "" {
			t.Errorf("ParseLocation(%q): %v", bad, err)
		}
	}
	l, _ := ParseLocation("s3://bkt/org/model")
	if got := l.Join("model.safetensors").String(); got != "s3://bkt/org/model/model.safetensors" {
		t.Errorf("Join: %s", got)
	}
	if got := l.Dir().Dir().String(); got != "s3://bkt" {
		t.Errorf("Dir: %s", got)
	}
	h, _ := ParseLocation("https://h/a/b.json?sig=1")
	if got := h.Dir().Join("c.safetensors").String(); got != "https://h/a/c.safetensors" {
		t.Errorf("http Join: %s", got)
	}
}

// Parsed locations format back to a location that parses the same.
func FuzzParseLocation(f *testing.F) {
	for _, s := range []string{"s3://bucket/a/b", "https://h:1/x.json?q=1", "http://127.0.0.1/a%2Fb", "s3://b/../x", "s3://bkt/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLocation(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error of another kind: %v", err)
			}
			return
		}
		if l.Key != "" && !fs.ValidPath(l.Key) {
			t.Fatalf("key %q is not a valid name", l.Key)
		}
		again, err := ParseLocation(l.String())
		if err != nil || again != l {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, l, l.String(), again, err)
		}
	})
}

func TestParseContentRange(t *testing.T) {
	type r struct{ first, last, size int64 }
	for in, want := range map[string]r{"bytes 0-9/10": {0, 9, 10}, "bytes 5-5/100": {5, 5, 100}, " bytes 1-2/3 ": {1, 2, 3}} {
		a, b, c, ok := parseContentRange(in)
		if !ok || (r{a, b, c}) != want {
			t.Errorf("%q: %d %d %d %v", in, a, b, c, ok)
		}
	}
	for _, bad := range []string{"", "bytes */10", "bytes 5-4/10", "bytes 0-9/9", "bytes -1-2/3", "items 0-1/2", "bytes 0-1", "bytes 0-x/2", "bytes 0-99999999999999999999/1"} {
		if _, _, _, ok := parseContentRange(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseContentRange(f *testing.F) {
	f.Add("bytes 0-9/10")
	f.Add("bytes */0")
	f.Fuzz(func(t *testing.T, s string) {
		first, last, size, ok := parseContentRange(s)
		if ok && (first < 0 || last < first || size <= last) {
			t.Fatalf("%q: %d-%d/%d", s, first, last, size)
		}
	})
}

func TestErrorKinds(t *testing.T) {
	names := map[string]bool{}
	for k := ErrorKind(1); int(k) < len(kindNames); k++ {
		n := k.String()
		if n == "unknown" || names[n] || strings.ToLower(n) != n {
			t.Errorf("kind %d: %q", k, n)
		}
		names[n] = true
	}
	e := &Error{Kind: ErrNotFound, Location: "s3://b/k", Range: "bytes=0-9", Status: 404, Attempts: 2, Msg: "m", Err: errors.New("cause")}
	if !errors.Is(e, ErrNotFound) || !errors.Is(e, fs.ErrNotExist) || errors.Is(e, ErrChanged) {
		t.Error("Is")
	}
	for _, part := range []string{"not_found", "s3://b/k", "bytes=0-9", "HTTP 404", "2 attempts", "cause"} {
		if !strings.Contains(e.Error(), part) {
			t.Errorf("%q lacks %q", e.Error(), part)
		}
	}
}

func TestAddSpan(t *testing.T) {
	var have []span
	for _, s := range []span{{10, 20}, {30, 40}, {0, 5}, {20, 30}, {5, 10}, {35, 38}} {
		have = addSpan(have, s)
	}
	if !slices.Equal(have, []span{{0, 40}}) {
		t.Errorf("%v", have)
	}
	have = addSpan(addSpan(nil, span{50, 60}), span{0, 10})
	if !slices.Equal(have, []span{{0, 10}, {50, 60}}) {
		t.Errorf("%v", have)
	}
}

func TestPathStyle(t *testing.T) {
	for ep, want := range map[string]bool{"http://127.0.0.1:9000": true, "http://localhost:9000": true, "http://[::1]:9000": true,
		"https://s3.us-east-1.amazonaws.com": false, "https://minio.example.com": false, "": false} {
		if got := PathStyle(ep); got != want {
			t.Errorf("PathStyle(%q) = %v", ep, got)
		}
	}
	// The package reads no environment: CKPT_S3_PATH_STYLE is the ckpt
	// command's (cmd/ckpt's s3PathStyle).
	t.Setenv("CKPT_S3_PATH_STYLE", "1")
	if PathStyle("https://minio.example.com") {
		t.Error("PathStyle read CKPT_S3_PATH_STYLE")
	}
}

// NewS3Client pins what S3-compatible stores need and keeps enough idle
// connections for the default concurrency.
func TestNewS3Client(t *testing.T) {
	c := NewS3Client(aws.Config{Region: "us-east-1"}, "http://127.0.0.1:9000", true)
	o := c.Options()
	if aws.ToString(o.BaseEndpoint) != "http://127.0.0.1:9000" || !o.UsePathStyle ||
		o.RequestChecksumCalculation != aws.RequestChecksumCalculationWhenRequired {
		t.Errorf("options %+v", o)
	}
	bc, ok := o.HTTPClient.(*awshttp.BuildableClient)
	if !ok || bc.GetTransport().MaxIdleConnsPerHost < DefaultConcurrency {
		t.Errorf("HTTP client %T", o.HTTPClient)
	}
	if tr := defaultHTTPClient().Transport.(*http.Transport); tr.MaxIdleConnsPerHost < DefaultConcurrency {
		t.Errorf("HTTP transport keeps %d idle connections", tr.MaxIdleConnsPerHost)
	}
}
