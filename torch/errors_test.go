package torch

import (
	"errors"
	"io"
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
type failure = testutil.Failure[ErrorKind]

// The checks behind the general kinds, as their messages name them.
var (
	invalidArchive    = failure{Kind: ErrInvalidFormat, What: ": invalid archive: "}
	invalidPickle     = failure{Kind: ErrInvalidFormat, What: ": invalid pickle: "}
	missingRecord     = failure{Kind: ErrInvalidFormat, What: ": missing record: "}
	storageSize       = failure{Kind: ErrInvalidFormat, What: ": storage size: "}
	tensorBounds      = failure{Kind: ErrInvalidFormat, What: ": tensor bounds: "}
	byteOrder         = failure{Kind: ErrInvalidFormat, What: ": byte order: "}
	invalidIndex      = failure{Kind: ErrInvalidFormat, What: ": invalid index: "}
	indexMismatch     = failure{Kind: ErrInvalidFormat, What: ": index mismatch: "}
	legacyFormat      = failure{Kind: ErrUnsupported, What: ": legacy format: "}
	unsupportedOpcode = failure{Kind: ErrUnsupported, What: ": unsupported opcode: "}
	limit             = failure{Kind: ErrUnsupported, What: ": limit: "}
	unsupportedDType  = failure{Kind: ErrUnsupported, What: ": unsupported dtype: "}
	unsupportedValue  = failure{Kind: ErrUnsupported, What: ": unsupported value: "}
	compressedRecord  = failure{Kind: ErrUnsupported, What: ": compressed record: "}
	duplicateName     = failure{Kind: ErrUnsupported, What: ": duplicate name: "}
)
