package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/internal/s3test"
)

// The package's S3 server, started on first use and stopped by TestMain.
var (
	s3Once   sync.Once
	s3Srv    *s3test.Server
	s3Reason string
	s3Err    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	s3Srv.Stop()
	os.Exit(code)
}

func needS3(t *testing.T) *s3test.Server {
	t.Helper()
	s3Once.Do(func() { s3Srv, s3Reason, s3Err = s3test.Start() })
	s := s3test.Need(t, s3Srv, s3Reason, s3Err)
	// The command builds its client from the standard AWS environment.
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	t.Setenv("AWS_REGION", s.Region)
	t.Setenv("AWS_ENDPOINT_URL_S3", s.Endpoint)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	return s
}

// plan, get, inspect, validate and resolve take s3:// and http(s)://
// locations and print what they print for the local folder.
func TestRemoteLocations(t *testing.T) {
	s := needS3(t)
	root := t.TempDir()
	dir := filepath.Join(root, "m")
	if _, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t, "a.w:BF16[16,8] a.n:F32[8] b.w:F16[4,4]")}); err != nil {
		t.Fatal(err)
	}
	bucket := s.NewBucket(t)
	s.PutDir(t, bucket, "org/m", dir)
	loc := "s3://" + bucket + "/org/m"
	web := httptest.NewServer(http.FileServer(http.Dir(root)))
	defer web.Close()
	index := "/model.safetensors.index.json"

	same := func(what string, local []string, remote []string, rewrite func(string) string) {
		t.Helper()
		lo, le, lc := runCLI(t, local...)
		ro, re, rc := runCLI(t, remote...)
		if lc != 0 || rc != lc {
			t.Fatalf("%s: exit %d (local %d): %s %s", what, rc, lc, re, le)
		}
		if rewrite(ro) != rewrite(lo) {
			t.Errorf("%s:\nremote %s\nlocal  %s", what, rewrite(ro), rewrite(lo))
		}
	}
	paths := func(s string) string {
		for _, p := range []string{dir, loc, web.URL + "/m", "org/m"} {
			s = strings.ReplaceAll(s, p, "PATH")
		}
		return s
	}
	same("plan", []string{"plan", "--dtype", "F32", dir}, []string{"plan", "--dtype", "F32", loc}, func(s string) string {
		// The read strategy differs: mmap locally, ranged reads remotely.
		var keep []string
		for _, l := range strings.Split(paths(s), "\n") {
			if !strings.Contains(l, "  read ") && !strings.Contains(l, "mapped") && !strings.Contains(l, "budget:") && !strings.Contains(l, "view") && !strings.Contains(l, "read  ") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	})
	same("inspect", []string{"inspect", dir}, []string{"inspect", loc}, paths)
	same("inspect index", []string{"inspect", dir + index}, []string{"inspect", loc + index}, paths)
	same("inspect http", []string{"inspect", dir + index}, []string{"inspect", web.URL + "/m" + index}, paths)
	same("validate", []string{"validate", dir + index}, []string{"validate", loc + index}, paths)
	same("resolve", []string{"resolve", dir}, []string{"resolve", loc}, paths)

	for _, src := range []string{loc, web.URL + "/m" + index} {
		out := filepath.Join(t.TempDir(), "w.bin")
		if _, stderr, code := runCLI(t, "get", "--format", "raw", "-o", out, src, "a.w"); code != 0 {
			t.Fatalf("get %s: %s", src, stderr)
		}
		got, _ := os.ReadFile(out)
		want, _ := ckpttest.Fill("a.w", ckpttest.Tensors(t, "a.w:BF16[16,8]")[0].DType, []int64{16, 8})
		if !bytes.Equal(got, want) {
			t.Errorf("get %s: bytes differ", src)
		}
	}
	_, stderr, code := runCLI(t, "inspect", web.URL+"/m")
	if code != 1 || !strings.Contains(stderr, "not folders") {
		t.Errorf("http folder: %d %s", code, stderr)
	}
	_, stderr, code = runCLI(t, "inspect", "s3://"+bucket+"/nothing")
	if code != 1 || !strings.Contains(stderr, "not_found") {
		t.Errorf("missing: %d %s", code, stderr)
	}
}

// ckpt convert writes to s3://, refuses to replace weights there without
// --overwrite, and reads its own output back with --verify.
func TestConvertToS3(t *testing.T) {
	s := needS3(t)
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t, "a.w:F32[64,32] a.n:F32[32] b.w:F32[32,32]")})
	bucket := s.NewBucket(t)
	loc := "s3://" + bucket + "/out/m"
	if _, stderr, code := runCLI(t, "convert", src, loc, "--dtype", "bf16", "--max-shard-size", "4KiB", "--verify"); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, stderr)
	}
	out, stderr, code := runCLI(t, "validate", loc)
	if code != 0 {
		t.Fatalf("validate: exit %d: %s %s", code, out, stderr)
	}
	if _, stderr, code := runCLI(t, "convert", src, loc, "--dtype", "f16"); code != 1 || !strings.Contains(stderr, "--overwrite") {
		t.Fatalf("convert over weights: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runCLI(t, "convert", src, loc, "--dtype", "f16", "--overwrite", "--verify"); code != 0 {
		t.Fatalf("convert --overwrite: exit %d: %s", code, stderr)
	}
	out, _, _ = runCLI(t, "plan", loc)
	if !strings.Contains(out, "F16") {
		t.Errorf("plan after --overwrite:\n%s", out)
	}
}

// ckpt convert reads s3:// sources: into a folder and into s3://, the
// same tensors as from the local copy.
func TestConvertFromS3(t *testing.T) {
	s := needS3(t)
	src := ckpttest.Dir(t, ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t, "a.w:F32[64,32] a.n:F32[32] b.w:F32[32,32]")})
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"model_type": "llama", "torch_dtype": "float32"}`), 0o644)
	bucket := s.NewBucket(t)
	s.PutDir(t, bucket, "in/m", src)
	in := "s3://" + bucket + "/in/m"
	local := filepath.Join(t.TempDir(), "local")
	if _, stderr, code := runCLI(t, "convert", src, local, "--dtype", "bf16", "--max-shard-size", "4KiB"); code != 0 {
		t.Fatalf("convert local: exit %d: %s", code, stderr)
	}
	get := func(loc string) []byte {
		t.Helper()
		out := filepath.Join(t.TempDir(), "w.bin")
		if _, stderr, code := runCLI(t, "get", "--format", "raw", "-o", out, loc, "a.w"); code != 0 {
			t.Fatalf("get %s: %s", loc, stderr)
		}
		b, _ := os.ReadFile(out)
		return b
	}
	want := get(local)
	wantInspect, _, _ := runCLI(t, "inspect", local)
	for _, dst := range []string{filepath.Join(t.TempDir(), "out"), "s3://" + bucket + "/out/m"} {
		if _, stderr, code := runCLI(t, "convert", in, dst, "--dtype", "bf16", "--max-shard-size", "4KiB", "--verify"); code != 0 {
			t.Fatalf("convert %s %s: exit %d: %s", in, dst, code, stderr)
		}
		if out, stderr, code := runCLI(t, "validate", dst); code != 0 {
			t.Errorf("validate %s: exit %d: %s %s", dst, code, out, stderr)
		}
		if got := get(dst); !bytes.Equal(got, want) || len(want) != 64*32*2 {
			t.Errorf("%s: a.w differs from the local conversion (%d bytes, want %d)", dst, len(got), len(want))
		}
		got, _, _ := runCLI(t, "inspect", dst)
		// The source's name differs (the local copy's folder is a temporary).
		got = strings.Replace(got, "ckpt.convert.source = m\n", "ckpt.convert.source = "+filepath.Base(src)+"\n", 1)
		if strings.ReplaceAll(got, dst, "PATH") != strings.ReplaceAll(wantInspect, local, "PATH") {
			t.Errorf("inspect %s:\n%s\nwant\n%s", dst, got, wantInspect)
		}
	}
}

// The command addresses S3 buckets by path for an IP or localhost endpoint,
// and for any endpoint with CKPT_S3_PATH_STYLE=1 (package remote reads no
// environment).
func TestS3PathStyle(t *testing.T) {
	t.Setenv("CKPT_S3_PATH_STYLE", "")
	for ep, want := range map[string]bool{"http://127.0.0.1:9000": true, "http://localhost:9000": true,
		"https://s3.us-east-1.amazonaws.com": false, "https://minio.example.com": false, "": false} {
		if got := s3PathStyle(ep); got != want {
			t.Errorf("s3PathStyle(%q) = %v", ep, got)
		}
	}
	t.Setenv("CKPT_S3_PATH_STYLE", "1")
	if !s3PathStyle("https://minio.example.com") {
		t.Error("CKPT_S3_PATH_STYLE=1 ignored")
	}
}

// inspect names the files of an http(s) index as it names those of a
// local one: relative to the index's folder.
func TestInspectFileNamesHTTP(t *testing.T) {
	root := t.TempDir()
	if _, err := ckpttest.WriteWeights(filepath.Join(root, "m"), ckpttest.Weights{Shards: 2, Tensors: ckpttest.Tensors(t, "a:F32[4] b:F32[4]")}); err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(http.FileServer(http.Dir(root)))
	defer web.Close()
	files, byName := inspectFiles(t, web.URL+"/m/model.safetensors.index.json")
	shards := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	if len(files) != 2 || files[0] != shards[0] || files[1] != shards[1] || byName["a"] != shards[0] || byName["b"] != shards[1] {
		t.Errorf("files %q, tensor files %q, want %q", files, byName, shards)
	}
}
