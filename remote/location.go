package remote

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"
)

// Location is a parsed remote location: s3://BUCKET/KEY or an http(s) URL.
// Readers and writers of this package share it.
type Location struct {
	// Scheme is "s3", "https" or "http".
	Scheme string
	// Bucket is the S3 bucket ("" for HTTP).
	Bucket string
	// Key is the object key or key prefix under the bucket, or the URL's
	// path, without leading or trailing slashes ("" for the bucket's or
	// server's root).
	Key string
	// Host is the URL's host[:port] ("" for S3).
	Host string
	// RawQuery is the URL's query (a presigned URL's signature), kept for
	// the named file only ("" for S3).
	RawQuery string
}

// ParseLocation parses s3://BUCKET[/KEY] or http(s)://HOST[/PATH]. Keys and
// paths are cleaned: "." and ".." elements and empty elements are refused
// (ErrInvalid), since they would name another object than they seem to.
// A trailing slash is dropped.
func ParseLocation(s string) (Location, error) {
	bad := func(msg string) (Location, error) {
		return Location{}, &Error{Kind: ErrInvalid, Location: s, Msg: msg}
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return bad("not a location SCHEME://...")
	}
	switch strings.ToLower(scheme) {
	case "s3":
		bucket, key, _ := strings.Cut(rest, "/")
		if !validBucket(bucket) {
			return bad(fmt.Sprintf("bucket %q is not a valid S3 bucket name", bucket))
		}
		if strings.ContainsAny(key, "?#") {
			return bad("an s3:// location has no query or fragment")
		}
		key = strings.TrimSuffix(key, "/")
		if err := checkKey(key); err != nil {
			return bad(err.Error())
		}
		return Location{Scheme: "s3", Bucket: bucket, Key: key}, nil
	case "http", "https":
		u, err := url.Parse(s)
		if err != nil {
			return bad(err.Error())
		}
		if u.Host == "" {
			return bad("no host")
		}
		if u.User != nil {
			return bad("credentials in the URL are not supported")
		}
		if u.Fragment != "" {
			return bad("a URL fragment names no file")
		}
		key := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
		if err := checkKey(key); err != nil {
			return bad(err.Error())
		}
		return Location{Scheme: strings.ToLower(u.Scheme), Host: u.Host, Key: key, RawQuery: u.RawQuery}, nil
	}
	return bad(fmt.Sprintf("scheme %q is not s3, https or http", scheme))
}

// checkKey refuses keys with empty, "." or ".." elements, and keys that
// are not valid UTF-8.
func checkKey(key string) error {
	if key == "" {
		return nil
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("key %q is not valid UTF-8", key)
	}
	for _, e := range strings.Split(key, "/") {
		switch e {
		case "":
			return fmt.Errorf("key %q has an empty element (//)", key)
		case ".", "..":
			return fmt.Errorf("key %q has a %q element", key, e)
		}
	}
	return nil
}

// validBucket checks the S3 bucket naming rules loosely: 3 to 63
// characters of lower-case letters, digits, '.', '-' and '_' (some
// S3-compatible stores allow upper case and '_': they are accepted too).
func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// String formats the location back: s3://BUCKET/KEY or the URL.
func (l Location) String() string {
	switch l.Scheme {
	case "s3":
		if l.Key == "" {
			return "s3://" + l.Bucket
		}
		return "s3://" + l.Bucket + "/" + l.Key
	}
	u := url.URL{Scheme: l.Scheme, Host: l.Host, Path: "/" + l.Key, RawQuery: l.RawQuery}
	return u.String()
}

// Join returns the location of the names elem under l (slash-separated,
// cleaned), without l's query.
func (l Location) Join(elem ...string) Location {
	l.Key = strings.TrimPrefix(path.Join(append([]string{"/" + l.Key}, elem...)...), "/")
	l.RawQuery = ""
	return l
}

// Dir returns the location of l's parent folder ("" key for the root),
// without l's query.
func (l Location) Dir() Location {
	i := strings.LastIndexByte(l.Key, '/')
	if i < 0 {
		l.Key = ""
	} else {
		l.Key = l.Key[:i]
	}
	l.RawQuery = ""
	return l
}
