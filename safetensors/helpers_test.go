package safetensors

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

// file builds raw safetensors bytes: length field, header, data.
func file(header string, data []byte) []byte {
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func wantKind(t *testing.T, err error, kind ErrorKind) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", kind)
	}
	if !errors.Is(err, kind) {
		t.Fatalf("got %v, want kind %v", err, kind)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%v is not an *Error", err)
	}
	return e
}

// wantCtxErr fails unless err is an *Error that matches ctxErr
// (context.Canceled or context.DeadlineExceeded) and says "canceled".
func wantCtxErr(t *testing.T, err, ctxErr error) {
	t.Helper()
	var e *Error
	if !errors.Is(err, ctxErr) || !errors.As(err, &e) || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("got %v, want a canceled *Error matching %v", err, ctxErr)
	}
}

// failure is what a test expects of an error: its kind and, for a general
// kind, the check its message names.
type failure = testutil.Failure[ErrorKind]

// The checks behind the general kinds, as their messages name them.
var (
	reservedName = failure{Kind: ErrInvalidArgument, What: ": reserved name: "}
	writeOrder   = failure{Kind: ErrInvalidArgument, What: ": write order: "}
	invalidSlice = failure{Kind: ErrInvalidArgument, What: ": invalid slice: "}
	fault        = failure{Kind: ErrIO, What: ": fault: memory fault"}
)

// wantCheck is wantKind for a check behind a general kind: err must also
// name the check.
func wantCheck(t *testing.T, err error, f failure) *Error {
	t.Helper()
	e := wantKind(t, err, f.Kind)
	if !strings.Contains(err.Error(), f.What) {
		t.Fatalf("got %v, want %v", err, f)
	}
	return e
}
