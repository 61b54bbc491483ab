package shard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/internal/testutil"
)

func TestParseIndexValid(t *testing.T) {
	ix, err := ParseIndex([]byte(`{"metadata":{"total_size":12,"format":"pt"},"weight_map":{"b":"m-00002-of-00002.safetensors","a":"m-00001-of-00002.safetensors","c":"m-00001-of-00002.safetensors"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ix.TotalSize != 12 || len(ix.WeightMap) != 3 || ix.Metadata["format"] != "pt" {
		t.Fatalf("got %+v", ix)
	}
	if got := strings.Join(ix.Names(), ","); got != "b,a,c" {
		t.Errorf("Names() = %s, want file order b,a,c", got)
	}
	if got := strings.Join(ix.Shards(), ","); got != "m-00001-of-00002.safetensors,m-00002-of-00002.safetensors" {
		t.Errorf("Shards() = %s", got)
	}
	if len(ix.Warnings) != 0 {
		t.Errorf("warnings: %v", ix.Warnings)
	}
}

func TestParseIndexWarnings(t *testing.T) {
	for _, tc := range []struct{ doc, warn string }{
		{`{"weight_map":{"a":"x.safetensors"},"extra":1}`, `unknown top-level key "extra"`},
		{`{"weight_map":{"a":"x.safetensors"},"metadata":null}`, `"metadata" is null`},
		{`{"weight_map":{"a":"x.safetensors"},"metadata":{"total_size":"12"}}`, `total_size the string "12" is not a byte count`},
		{`{"weight_map":{"a":"x.safetensors"},"metadata":{"total_size":-1}}`, `total_size the number -1`},
		{`{"weight_map":{"a":"x.safetensors"},"metadata":{"total_size":1.5}}`, `total_size the number 1.5`},
	} {
		ix, err := ParseIndex([]byte(tc.doc))
		if err != nil {
			t.Errorf("%s: %v", tc.doc, err)
			continue
		}
		if ix.TotalSize != 0 {
			t.Errorf("%s: TotalSize %d", tc.doc, ix.TotalSize)
		}
		if !strings.Contains(strings.Join(ix.Warnings, "|"), tc.warn) {
			t.Errorf("%s: warnings %q lack %q", tc.doc, ix.Warnings, tc.warn)
		}
	}
	ix, err := ParseIndex([]byte(`{"weight_map":{"a":"x.safetensors"},"metadata":{"total_size":1.6e10}}`))
	if err != nil || ix.TotalSize != 16_000_000_000 || len(ix.Warnings) != 0 {
		t.Errorf("float total_size: %v %+v", err, ix)
	}
}

func TestParseIndexErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc     string
		kind          failure
		tensor, shard string
	}{
		{"empty input", ``, indexInvalidJSON, "", ""},
		{"not json", `weights`, indexInvalidJSON, "", ""},
		{"truncated", `{"weight_map":{"a":"x.safetensors"`, indexInvalidJSON, "", ""},
		{"array", `[1,2]`, indexInvalidJSON, "", ""},
		{"trailing data", `{"weight_map":{"a":"x.safetensors"}} {}`, indexInvalidJSON, "", ""},
		{"duplicate weight_map", `{"weight_map":{"a":"x.safetensors"},"weight_map":{"b":"x.safetensors"}}`, indexInvalidJSON, "", ""},
		{"no weight_map", `{"metadata":{"total_size":1}}`, indexMissingWeightMap, "", ""},
		{"weight_map array", `{"weight_map":["x.safetensors"]}`, indexInvalidWeightMap, "", ""},
		{"weight_map null", `{"weight_map":null}`, indexInvalidWeightMap, "", ""},
		{"weight_map empty", `{"weight_map":{}}`, indexInvalidWeightMap, "", ""},
		{"shard not string", `{"weight_map":{"a":1}}`, indexInvalidWeightMap, "a", ""},
		{"shard object", `{"weight_map":{"a":{"f":"x.safetensors"}}}`, indexInvalidWeightMap, "a", ""},
		{"empty tensor name", `{"weight_map":{"":"x.safetensors"}}`, indexInvalidWeightMap, "", "x.safetensors"},
		{"duplicate tensor", `{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}`, indexDuplicateTensor, "a", ""},
		{"metadata array", `{"weight_map":{"a":"x.safetensors"},"metadata":[]}`, indexInvalidMetadata, "", ""},
		{"parent dir", `{"weight_map":{"a":"../x.safetensors"}}`, failure{Kind: ErrInsecurePath, What: ""}, "a", "../x.safetensors"},
		{"dotdot", `{"weight_map":{"a":".."}}`, failure{Kind: ErrInsecurePath, What: ""}, "a", ".."},
		{"absolute", `{"weight_map":{"a":"/etc/x.safetensors"}}`, failure{Kind: ErrInsecurePath, What: ""}, "a", "/etc/x.safetensors"},
		{"subdir", `{"weight_map":{"a":"sub/x.safetensors"}}`, failure{Kind: ErrInsecurePath, What: ""}, "a", "sub/x.safetensors"},
		{"backslash", `{"weight_map":{"a":"sub\\x.safetensors"}}`, failure{Kind: ErrInsecurePath, What: ""}, "a", `sub\x.safetensors`},
		{"drive letter", `{"weight_map":{"a":"C:x.safetensors"}}`, failure{Kind: ErrInsecurePath, What: ""}, "a", "C:x.safetensors"},
		{"windows absolute", `{"weight_map":{"a":"C:\\w\\x.safetensors"}}`, failure{Kind: ErrInsecurePath, What: ""}, "a", `C:\w\x.safetensors`},
		{"unc", `{"weight_map":{"a":"\\\\srv\\x.safetensors"}}`, failure{Kind: ErrInsecurePath, What: ""}, "a", `\\srv\x.safetensors`},
		{"other extension", `{"weight_map":{"a":"x.bin"}}`, invalidShardName, "a", "x.bin"},
		{"bare extension", `{"weight_map":{"a":".safetensors"}}`, invalidShardName, "a", ".safetensors"},
		{"empty shard", `{"weight_map":{"a":""}}`, invalidShardName, "a", ""},
		{"control char", `{"weight_map":{"a":"x\u0000.safetensors"}}`, invalidShardName, "a", "x\x00.safetensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := ParseIndex([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted: %+v", ix)
			}
			if !tc.kind.Matches(err) {
				t.Fatalf("got %v, want kind %s", err, tc.kind)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not *Error", err)
			}
			if e.Tensor != tc.tensor || e.Shard != tc.shard {
				t.Errorf("tensor %q shard %q, want %q %q (%v)", e.Tensor, e.Shard, tc.tensor, tc.shard, err)
			}
		})
	}
}

func TestReadIndexNamesFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model.safetensors.index.json")
	os.WriteFile(p, []byte(`{"weight_map":{"a":"../evil.safetensors"}}`), 0o644)
	_, err := ReadIndex(p)
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrInsecurePath || e.Path != p {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "../evil.safetensors") {
		t.Errorf("message %q does not name the file and shard", err)
	}
	_, err = ReadIndex(filepath.Join(dir, "absent.json"))
	if !errors.Is(err, ErrIndexRead) {
		t.Errorf("absent: %v", err)
	}
}

func TestReadIndexTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.safetensors.index.json")
	testutil.SparseFile(t, p, MaxIndexSize+1)
	if _, err := ReadIndex(p); !indexTooLarge.Matches(err) {
		t.Fatalf("got %v", err)
	}
}

// realFixtures is the shared folder of files written by other programs.
const realFixtures = "../../shared/fixtures/real"

func TestReadIndexReal(t *testing.T) {
	p := filepath.Join(realFixtures, "index", "granite-3.1-1b-a400m-instruct.model.safetensors.index.json")
	if _, err := os.Stat(p); err != nil {
		t.Skip("real fixtures not present:", err)
	}
	ix, err := ReadIndex(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.WeightMap) != 218 || ix.TotalSize != 5338513408 || len(ix.Warnings) != 0 {
		t.Fatalf("got %d tensors, total %d, warnings %v", len(ix.WeightMap), ix.TotalSize, ix.Warnings)
	}
	if got := ix.Shards(); len(got) != 2 || got[0] != "model-00001-of-00002.safetensors" || got[1] != "model-00002-of-00002.safetensors" {
		t.Errorf("shards %v", got)
	}
	if ix.WeightMap["model.embed_tokens.weight"] != "model-00001-of-00002.safetensors" {
		t.Errorf("embed_tokens in %q", ix.WeightMap["model.embed_tokens.weight"])
	}
}
