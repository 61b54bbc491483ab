package remote

import (
	"context"
	"io/fs"
	"net/http"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckpt-go/ckpt/source"
	"github.com/ckpt-go/ckpt/variant"
)

func init() {
	source.Register("s3", openS3)
	source.Register("https", openHTTP)
	source.Register("http", openHTTP)
}

var defaults struct {
	sync.RWMutex
	s3   *s3.Client
	http *http.Client
	opts []Option
}

// SetS3Client sets the client that s3:// locations given to ckpt.Open (and
// to the other users of source.Open) are read with. Until it is set,
// they fail with ErrInvalid: this package never builds one itself (the
// ckpt command builds one from the standard AWS environment, shared
// config files and instance roles; see NewS3Client). nil unsets it.
func SetS3Client(c *s3.Client) {
	defaults.Lock()
	defaults.s3 = c
	defaults.Unlock()
}

// SetHTTPClient sets the client that http:// and https:// locations are
// read with (nil: NewHTTPFS's default).
func SetHTTPClient(c *http.Client) {
	defaults.Lock()
	defaults.http = c
	defaults.Unlock()
}

// SetOptions sets the options of the file systems opened for registered
// locations (concurrency, chunk size, retries, cache, ...), replacing
// earlier ones.
func SetOptions(opts ...Option) {
	defaults.Lock()
	defaults.opts = append([]Option(nil), opts...)
	defaults.Unlock()
}

func current() (*s3.Client, *http.Client, []Option) {
	defaults.RLock()
	defer defaults.RUnlock()
	return defaults.s3, defaults.http, defaults.opts
}

// openS3 opens an s3:// location for ckpt.Open.
func openS3(_ context.Context, location string) (fs.FS, string, error) {
	loc, err := ParseLocation(location)
	if err != nil {
		return nil, "", err
	}
	client, _, opts := current()
	if client == nil {
		return nil, "", &Error{Kind: ErrInvalid, Location: location,
			Msg: "no S3 client: call remote.SetS3Client (the ckpt command builds one from the AWS environment)"}
	}
	return NewS3FS(client, loc.Bucket, opts...), nameOf(loc), nil
}

// openHTTP opens an http(s):// location for ckpt.Open: a file system at
// the server's root, the location's query kept for its file.
func openHTTP(_ context.Context, location string) (fs.FS, string, error) {
	loc, err := ParseLocation(location)
	if err != nil {
		return nil, "", err
	}
	_, client, opts := current()
	fsys, err := NewHTTPFS(client, loc.Scheme+"://"+loc.Host, opts...)
	if err != nil {
		return nil, "", err
	}
	name := nameOf(loc)
	if !strings.HasSuffix(name, ".safetensors") && !strings.HasSuffix(name, ".json") && !variant.IsPyTorchName(name) {
		return nil, "", &Error{Kind: ErrInvalid, Location: location,
			Msg: "http(s) sources take files (.safetensors, or PyTorch's .bin, .pt, .pth, .ckpt) and indexes (.json), not folders, which plain HTTP cannot list"}
	}
	fsys.be.(*httpBackend).withQuery(name, loc.RawQuery)
	return fsys, name, nil
}

func nameOf(loc Location) string {
	if loc.Key == "" {
		return "."
	}
	return loc.Key
}
