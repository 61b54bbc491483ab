// Package testutil holds helpers shared by the tests of several ckpt
// packages. It is imported only from _test.go files.
package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// Entries returns the names in dir, sorted by name, failing the test if the
// folder cannot be read. Tests use it to check that no temporary file is
// left behind.
func Entries(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// WriteSyntheticShards writes into dir one tiny safetensors file for each
// shard file of weightMap (tensor name -> shard file), holding that shard's
// tensors, in the order of names, as two-element BF16 tensors. It stands in
// for the real shards of a real index.
func WriteSyntheticShards(t testing.TB, dir string, names []string, weightMap map[string]string) {
	t.Helper()
	byShard := map[string][]ckpttest.Tensor{}
	for _, n := range names {
		byShard[weightMap[n]] = append(byShard[weightMap[n]], ckpttest.T(n, dtype.BF16, 2))
	}
	for s, ts := range byShard {
		if err := ckpttest.WriteFile(filepath.Join(dir, s), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// Kinds returns every kind of a package's name table (indexed by kind,
// from 1): 1 to len(names)-1, in order.
func Kinds[K ~int](names []string) []K {
	out := make([]K, 0, max(len(names)-1, 0))
	for k := K(1); int(k) < len(names); k++ {
		out = append(out, k)
	}
	return out
}

var snakeCase = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)

// CheckKinds checks the error-kind type of a ckpt package: there is at least
// one kind, every kind has a distinct snake_case name, and the error newErr
// builds for a kind matches that kind under errors.Is and no other one.
func CheckKinds[K interface {
	~int
	error
	String() string
}](t testing.TB, kinds []K, newErr func(K) error) {
	t.Helper()
	if len(kinds) == 0 {
		t.Fatal("no kinds")
	}
	seen := make(map[string]bool, len(kinds))
	for _, k := range kinds {
		s := k.String()
		if !snakeCase.MatchString(s) || seen[s] {
			t.Errorf("kind %d: name %q is not a distinct snake_case name", k, s)
		}
		seen[s] = true
		e := newErr(k)
		for _, o := range kinds {
			if got := errors.Is(e, o); got != (o == k) {
				t.Errorf("errors.Is(error of kind %s, %s) = %v", s, o.String(), got)
			}
		}
	}
}

// SparseFile creates the file path with size bytes and no data written (a
// sparse file where the filesystem allows it): a large file that costs no
// disk, for the checks that refuse oversized inputs.
func SparseFile(t testing.TB, path string, size int64) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// Failure is what a test expects of an error: its Kind and, for a general
// kind whose message names the check that failed, that check (What, a
// substring of the message).
type Failure[K interface {
	error
	String() string
}] struct {
	Kind K
	What string
}

// String returns the kind and the check, for test messages.
func (f Failure[K]) String() string { return f.Kind.String() + " (" + f.What + ")" }

// Matches reports whether err is of f's kind and names f's check.
func (f Failure[K]) Matches(err error) bool {
	return err != nil && errors.Is(err, f.Kind) && strings.Contains(err.Error(), f.What)
}
