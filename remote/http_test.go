package remote_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/remote"
)

// fileServer serves the files of a folder: with Range support through
// http.ServeContent (and a strong ETag when etags is set), or, with
// noRange, always the whole file with 200. It counts GETs.
type fileServer struct {
	dir     string
	etags   bool
	noRange bool
	query   map[string]string // path → query it requires

	gets atomic.Int64
	mu   sync.Mutex
}

func (s *fileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if want, ok := s.query[r.URL.Path]; ok && r.URL.RawQuery != want {
		http.Error(w, "signature", http.StatusForbidden)
		return
	}
	s.mu.Lock()
	data, err := os.ReadFile(filepath.Join(s.dir, filepath.FromSlash(r.URL.Path)))
	st, _ := os.Stat(filepath.Join(s.dir, filepath.FromSlash(r.URL.Path)))
	s.mu.Unlock()
	if err != nil {
		http.NotFound(w, r)
		return
	}
	if r.Method == http.MethodGet {
		s.gets.Add(1)
	}
	if s.noRange {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data)
		return
	}
	if s.etags {
		h := sha256.Sum256(data)
		w.Header().Set("ETag", `"`+hex.EncodeToString(h[:8])+`"`)
	}
	http.ServeContent(w, r, r.URL.Path, st.ModTime(), bytes.NewReader(data))
}

// replace writes data to name in the served folder, with a later mtime.
func (s *fileServer) replace(t *testing.T, name string, data []byte) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := filepath.Join(s.dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(p, later, later)
}

// httpFolder writes a 3-shard checkpoint under dir/org/m and returns the
// local folder.
func httpFolder(t *testing.T, n int) (root, dir string) {
	root = t.TempDir()
	dir = filepath.Join(root, "org", "m")
	if _, err := ckpttest.WriteWeights(dir, ckpttest.Weights{Shards: 3, Tensors: ckpttest.Tensors(t, tensorSpec(n))}); err != nil {
		t.Fatal(err)
	}
	return root, dir
}

// https:// and http:// indexes and single files load the bytes of a local
// load, pinned by ETag or by Last-Modified; a folder cannot be listed.
func TestHTTPLoadsLikeLocal(t *testing.T) {
	root, dir := httpFolder(t, 30)
	for _, etags := range []bool{true, false} {
		fsrv := &fileServer{dir: root, etags: etags}
		srv := httptest.NewTLSServer(fsrv)
		remote.SetHTTPClient(srv.Client())
		for _, target := range []ckpt.Target{{}, ckpt.To(dtype.F32)} {
			want := load(t, open(t, dir, ckpt.WithDType(target)))
			got := load(t, open(t, srv.URL+"/org/m/model.safetensors.index.json", ckpt.WithDType(target)))
			sameTensors(t, "https index", got, want)
		}
		single := load(t, open(t, srv.URL+"/org/m/model-00002-of-00003.safetensors"))
		want := load(t, open(t, filepath.Join(dir, "model-00002-of-00003.safetensors")))
		sameTensors(t, "https single file", single, want)
		_, err := ckpt.Open(srv.URL + "/org/m")
		if !errors.Is(err, remote.ErrInvalid) || !strings.Contains(err.Error(), "not folders, which plain HTTP cannot list") {
			t.Errorf("folder: %v", err)
		}
		_, err = ckpt.Open(srv.URL + "/org/missing.safetensors")
		if !errors.Is(err, remote.ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing: %v", err)
		}
		srv.Close()
	}
	remote.SetHTTPClient(nil)

	plain := httptest.NewServer(&fileServer{dir: root, etags: true})
	defer plain.Close()
	sameTensors(t, "http index", load(t, open(t, plain.URL+"/org/m/model.safetensors.index.json")), load(t, open(t, dir)))

	// NewHTTPFS under a base path, through WithFS: one ranged GET a file
	// to open, then the data in coalesced requests.
	fsrv := &fileServer{dir: root, etags: true}
	srv := httptest.NewServer(fsrv)
	defer srv.Close()
	fsys, err := remote.NewHTTPFS(nil, srv.URL+"/org")
	if err != nil {
		t.Fatal(err)
	}
	m := open(t, "m/model.safetensors.index.json", ckpt.WithFS(fsys))
	// The index, 3 shards, and config.json and hf_quant_config.json found
	// missing.
	if st := fsys.Stats(); st.GETs != 6 || st.HEADs != 0 {
		t.Errorf("open made %+v", st)
	}
	sameTensors(t, "NewHTTPFS", load(t, m), load(t, open(t, dir)))
	if _, err := remote.NewHTTPFS(nil, "ftp://x"); !errors.Is(err, remote.ErrInvalid) || !strings.Contains(err.Error(), "ftp://x: not an http(s)://HOST[/PATH] URL") {
		t.Errorf("ftp: %v", err)
	}
}

// A server that ignores Range requests is refused with ErrRequest as soon
// as a file larger than the first read comes back whole; a small file (a
// config, an index) read whole is fine.
func TestHTTPWithoutRangeSupport(t *testing.T) {
	root, _ := httpFolder(t, 3)
	big := ckpttest.File(t, ckpttest.Tensors(t, "w:F32[512,1024]")...) // 2 MiB
	data, _ := os.ReadFile(big)
	os.WriteFile(filepath.Join(root, "big.safetensors"), data, 0o644)
	srv := httptest.NewServer(&fileServer{dir: root, noRange: true})
	defer srv.Close()
	_, err := ckpt.Open(srv.URL + "/big.safetensors")
	var re *remote.Error
	if !errors.Is(err, remote.ErrRequest) || !errors.As(err, &re) || re.Status != 200 || !strings.Contains(err.Error(), "the server ignores Range requests") {
		t.Fatalf("big file: %v", err)
	}
	fsys, _ := remote.NewHTTPFS(nil, srv.URL)
	b, err := fs.ReadFile(fsys, "org/m/model.safetensors.index.json")
	if err != nil || !bytes.Contains(b, []byte("weight_map")) {
		t.Errorf("small file: %v", err)
	}
}

// A file replaced while it is read fails with ErrChanged, pinned by ETag
// (If-Match) or by Last-Modified (If-Unmodified-Since).
func TestHTTPFileReplaced(t *testing.T) {
	for _, etags := range []bool{true, false} {
		root, dir := httpFolder(t, 12)
		fsrv := &fileServer{dir: root, etags: etags}
		srv := httptest.NewServer(fsrv)
		m := open(t, srv.URL+"/org/m/model.safetensors.index.json")
		name := "model-00003-of-00003.safetensors"
		data, _ := os.ReadFile(filepath.Join(dir, name))
		other := bytes.Clone(data)
		other[len(other)-1] ^= 0xff
		fsrv.replace(t, "org/m/"+name, other)
		_, err := tryLoad(context.Background(), m)
		if !errors.Is(err, remote.ErrChanged) {
			t.Errorf("etags %v: %v", etags, err)
		}
		srv.Close()
	}
}

// A presigned URL's query is sent for the file it names only.
func TestHTTPQueryKeptForItsFile(t *testing.T) {
	root := t.TempDir()
	f := ckpttest.File(t, ckpttest.Tensors(t, "a:F32[8] b:BF16[4,4]")...)
	data, _ := os.ReadFile(f)
	os.WriteFile(filepath.Join(root, "model.safetensors"), data, 0o644)
	fsrv := &fileServer{dir: root, etags: true, query: map[string]string{"/model.safetensors": "X-Sig=abc"}}
	srv := httptest.NewServer(fsrv)
	defer srv.Close()
	sameTensors(t, "presigned", load(t, open(t, srv.URL+"/model.safetensors?X-Sig=abc")), load(t, open(t, f)))
	if _, err := ckpt.Open(srv.URL + "/model.safetensors"); !errors.Is(err, remote.ErrRequest) || !strings.Contains(err.Error(), "access denied: HTTP 403") {
		t.Errorf("unsigned: %v", err)
	}
}

// A PyTorch file served over plain HTTP loads as the local file does.
func TestHTTPLoadsPyTorchFile(t *testing.T) {
	root := t.TempDir()
	views, storages, err := ckpttest.TorchOf(ckpttest.Tensors(t, tensorSpec(6)))
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(root, "pytorch_model.bin")
	if err := ckpttest.WriteTorch(local, views, storages); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&fileServer{dir: root, etags: true})
	defer srv.Close()
	for _, target := range []ckpt.Target{{}, ckpt.To(dtype.F32)} {
		got := load(t, open(t, srv.URL+"/pytorch_model.bin", ckpt.WithDType(target)))
		sameTensors(t, "http PyTorch file", got, load(t, open(t, local, ckpt.WithDType(target))))
	}
}
