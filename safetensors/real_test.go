package safetensors

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

// realFixtures locates the shared folder of real safetensors files:
// $CKPT_REAL_FIXTURES, or ../shared/fixtures/real next to the module root.
func realFixtures(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CKPT_REAL_FIXTURES"); d != "" {
		return d
	}
	return testutil.Fixtures(t, "real", "MANIFEST.tsv")
}

type manifestRow struct {
	path, reader, reserialize string
	tensors                   string
	metadata                  string
}

func readManifest(t *testing.T, root string) []manifestRow {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "MANIFEST.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []manifestRow
	sc := bufio.NewScanner(f)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		c := strings.Split(sc.Text(), "\t")
		if len(c) < 10 {
			continue
		}
		rows = append(rows, manifestRow{path: c[0], tensors: c[5], metadata: c[7], reader: c[8], reserialize: c[9]})
	}
	if len(rows) == 0 {
		t.Fatal("empty manifest")
	}
	return rows
}

// TestRealFiles reads every real file (mapped, through ReadAt, and from
// bytes); checks the invalid one is rejected with the reference's error kind;
// and re-saves every hf-written file byte-identical.
func TestRealFiles(t *testing.T) {
	root := realFixtures(t)
	for _, row := range readManifest(t, root) {
		t.Run(row.path, func(t *testing.T) {
			path := filepath.Join(root, row.path)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if row.reader != "OK" {
				_, err := Open(path)
				if err == nil {
					t.Fatal("invalid file accepted")
				}
				if strings.Contains(row.reserialize, "InvalidHeaderLength") && !errors.Is(err, ErrInvalidHeaderLength) {
					t.Fatalf("error %v, want kind %v", err, ErrInvalidHeaderLength)
				}
				var e *Error
				if !errors.As(err, &e) || e.File != path {
					t.Fatalf("error %v does not name the file", err)
				}
				if _, err := OpenBytes(raw); !errors.Is(err, ErrInvalidHeaderLength) {
					t.Fatalf("OpenBytes: %v", err)
				}
				return
			}
			for _, mode := range []string{"mmap", "readat", "bytes"} {
				var f *File
				switch mode {
				case "mmap":
					f, err = Open(path)
				case "readat":
					f, err = Open(path, WithReadAt())
				case "bytes":
					f, err = OpenBytes(raw)
				}
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				var tds []TensorData
				var prevEnd int64
				for name, tn := range f.Tensors() {
					// File order is offset order, whatever the header's key order.
					if tn.Info().Begin != prevEnd {
						t.Fatalf("%s: %s begins at %d, previous tensor ends at %d", mode, name, tn.Info().Begin, prevEnd)
					}
					prevEnd = tn.Info().End
					b, err := tn.Bytes()
					if err != nil {
						t.Fatalf("%s: %s: %v", mode, name, err)
					}
					want := raw[tn.Offset() : tn.Offset()+tn.ByteLen()]
					if !bytes.Equal(b, want) {
						t.Fatalf("%s: %s: bytes differ", mode, name)
					}
					cp := make([]byte, tn.ByteLen())
					if err := tn.ReadTo(cp); err != nil || !bytes.Equal(cp, want) {
						t.Fatalf("%s: %s: ReadTo: %v", mode, name, err)
					}
					tds = append(tds, TensorData{Name: name, DType: tn.DType(), Shape: tn.Shape(), Data: cp})
				}
				if row.metadata == "absent" || row.metadata == "null" {
					if f.Metadata() != nil {
						t.Fatalf("metadata %v, want nil", f.Metadata())
					}
				} else if len(f.Metadata()) == 0 {
					t.Fatalf("metadata missing, manifest says %s", row.metadata)
				}
				if strings.HasPrefix(row.path, "hf-written/") && mode == "mmap" {
					out, err := Serialize(tds, f.Metadata(), WithoutChecksums())
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(out, raw) {
						t.Fatalf("re-saved bytes differ from the original (%d vs %d bytes)", len(out), len(raw))
					}
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
