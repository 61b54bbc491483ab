package torch

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestErrorKinds(t *testing.T) {
	testutil.CheckKinds(t, testutil.Kinds[ErrorKind](kindNames[:]), func(k ErrorKind) error { return &Error{Kind: k} })
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Kind: ErrForbiddenGlobal, File: "m.pt", Record: "m/data.pkl", Tensor: "a.b", Global: "posix system", Msg: "refused", Err: io.EOF}
	if got, want := e.Error(), `torch: m.pt: m/data.pkl: tensor "a.b": global "posix system": refused: EOF`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := (&Error{Kind: ErrInvalidFormat}).Error(); got != "torch: invalid format" {
		t.Errorf("got %s", got)
	}
	if !errors.Is(e, io.EOF) || errors.Is(e, ErrUnsupported) {
		t.Error("Is/Unwrap")
	}
	if ErrUnsupported.Error() != "torch: unsupported" {
		t.Error(ErrUnsupported.Error())
	}
}

// failure is what a test expects of an error: its kind and, for a general
// kind, the check its message names.
type failure struct {
	kind ErrorKind
	what string
}

func (f failure) String() string { return f.kind.String() + " (" + f.what + ")" }

// matches reports whether err is of f's kind and names f's check.
func (f failure) matches(err error) bool {
	return errors.Is(err, f.kind) && strings.Contains(err.Error(), f.what)
}

// The checks behind the general kinds, as their messages name them.
var (
	invalidArchive    = failure{ErrInvalidFormat, ": invalid archive: "}
	invalidPickle     = failure{ErrInvalidFormat, ": invalid pickle: "}
	missingRecord     = failure{ErrInvalidFormat, ": missing record: "}
	storageSize       = failure{ErrInvalidFormat, ": storage size: "}
	tensorBounds      = failure{ErrInvalidFormat, ": tensor bounds: "}
	byteOrder         = failure{ErrInvalidFormat, ": byte order: "}
	invalidIndex      = failure{ErrInvalidFormat, ": invalid index: "}
	indexMismatch     = failure{ErrInvalidFormat, ": index mismatch: "}
	legacyFormat      = failure{ErrUnsupported, ": legacy format: "}
	unsupportedOpcode = failure{ErrUnsupported, ": unsupported opcode: "}
	limit             = failure{ErrUnsupported, ": limit: "}
	unsupportedDType  = failure{ErrUnsupported, ": unsupported dtype: "}
	unsupportedValue  = failure{ErrUnsupported, ": unsupported value: "}
	compressedRecord  = failure{ErrUnsupported, ": compressed record: "}
	duplicateName     = failure{ErrUnsupported, ": duplicate name: "}
)
