package remote

import (
	"io/fs"
	"strconv"
	"strings"

	"github.com/ckpt-go/ckpt/internal/errkind"
	"github.com/ckpt-go/ckpt/safetensors"
)

// ErrorKind classifies the failures of this package. Each kind is an error,
// so callers can test with errors.Is(err, remote.ErrChanged), also through
// the loader's *ckpt.Error and the lower packages' errors that wrap it. The
// kinds are general; the message (and Status, the HTTP status) says which
// case it is.
type ErrorKind int

// The kinds of Error. Their String forms (snake_case) are stable.
const (
	// ErrInvalid: what the caller asked cannot be used: a location that is
	// malformed or of an unsupported scheme, s3:// without an S3 client
	// (see SetS3Client), a folder of a source that cannot list one (plain
	// HTTP: name a file or an index instead), a cache's size bound that is
	// not positive. Errors of this kind also match fs.ErrInvalid.
	ErrInvalid ErrorKind = iota + 1
	// ErrRequest: a request that was refused or cannot be made: the server
	// refused the credentials (HTTP 401, 403) or the request (another 4xx,
	// a range past the object's end), ignores Range requests (it answered
	// 200 with the whole file to a ranged GET, so the file cannot be read
	// in parts: serve it with range support), answered with a malformed
	// range or without an ETag; or the caller's read or write cannot be
	// made (outside the object, after Close).
	ErrRequest
	// ErrUnavailable: a request kept failing with throttling, server
	// errors, timeouts, broken connections or responses that ended before
	// the bytes they announced, until its retries ran out; or the local
	// read-through cache could not be used (its folder cannot be created
	// or locked).
	ErrUnavailable
	// ErrNotFound: no object or file at that location. Errors of this kind
	// also match fs.ErrNotExist.
	ErrNotFound
	// ErrChanged: the object was replaced since it was opened: its ETag
	// (or, over HTTP without an ETag, its Last-Modified time) or size
	// differs, or the server refused the version pinned with If-Match. No
	// byte of the new version is handed out.
	ErrChanged
	// ErrExists: an exclusive write (If-None-Match: *) found an object of
	// that name, written by someone else meanwhile, or a conditional
	// replacement (If-Match, S3Sink.CreateReplacing) found the object
	// replaced or removed since the writer saw it; nothing was replaced.
	// Errors of this kind also match fs.ErrExist.
	ErrExists
	// ErrChecksum: the bytes that arrived are not the bytes the store
	// holds for the version opened: their CRC-32C differs from the
	// checksum the store recorded for the object (or for one of its
	// parts), or the store answered for the pinned ETag with another
	// size. Errors of this kind also match safetensors.ErrChecksum
	// (== ckpt.ErrChecksum): it is the condition the loader reports for a
	// tensor whose checksum differs.
	ErrChecksum
)

var kindNames = [...]string{
	ErrInvalid:     "invalid",
	ErrRequest:     "request",
	ErrUnavailable: "unavailable",
	ErrNotFound:    "not_found",
	ErrChanged:     "changed",
	ErrExists:      "exists",
	ErrChecksum:    "checksum",
}

// String returns the kind's snake_case name.
func (k ErrorKind) String() string { return errkind.Name(kindNames[:], k) }

// Error makes a kind usable as an errors.Is target.
func (k ErrorKind) Error() string { return "remote: " + k.String() }

// Error is this package's error: its kind, the location (s3://bucket/key or
// a URL), the byte range of the request when there was one, how many
// attempts were made, and the cause.
type Error struct {
	Kind     ErrorKind
	Location string
	Range    string // "bytes=FIRST-LAST", or ""
	Status   int    // the HTTP status of the last response, or 0
	Attempts int    // requests made (more than 1 after retries)
	Msg      string
	Err      error

	retry bool // the request may succeed if made again
}

// Error formats the kind, the location, the range and the cause.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("remote: ")
	b.WriteString(e.Kind.String())
	if e.Location != "" {
		b.WriteString(": ")
		b.WriteString(e.Location)
	}
	if e.Range != "" {
		b.WriteString(" (")
		b.WriteString(e.Range)
		b.WriteString(")")
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Status != 0 {
		b.WriteString(": HTTP ")
		b.WriteString(strconv.Itoa(e.Status))
	}
	if e.Attempts > 1 {
		b.WriteString(" after ")
		b.WriteString(strconv.Itoa(e.Attempts))
		b.WriteString(" attempts")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Is reports whether target is e's kind; ErrInvalid also matches
// fs.ErrInvalid, ErrNotFound fs.ErrNotExist, ErrExists fs.ErrExist, and
// ErrChecksum safetensors.ErrChecksum.
func (e *Error) Is(target error) bool {
	if k, ok := target.(ErrorKind); ok {
		return k == e.Kind
	}
	return e.Kind == ErrInvalid && target == fs.ErrInvalid || e.Kind == ErrNotFound && target == errNotExist ||
		e.Kind == ErrExists && target == fs.ErrExist || e.Kind == ErrChecksum && target == safetensors.ErrChecksum
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }
