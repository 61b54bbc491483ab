package safetensors

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
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
