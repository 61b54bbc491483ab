// Package s3test runs the S3-compatible server that the remote tests read
// from: versitygw with its posix backend, started by the test package's
// TestMain on a free 127.0.0.1 port with a temporary folder and stopped
// after its tests (a real server, not a mock of the client).
//
// The binary is looked up in .cache/bin of the repository (where
// .ci/install-versitygw.sh installs the pinned version) and then on PATH.
// CKPT_S3_ENDPOINT (with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_REGION) points the tests at another server instead; tests that kill
// or restart the server skip then. Without a server the tests skip with a
// message naming the install script, unless CKPT_REQUIRE_S3=1 (set by
// .ci/run), which makes them fail.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Install is the script that installs the server.
const Install = ".ci/install-versitygw.sh"

// Server is a running S3-compatible server.
type Server struct {
	// Endpoint is the server's URL (http://127.0.0.1:PORT).
	Endpoint string
	// AccessKey, SecretKey and Region are its credentials.
	AccessKey, SecretKey, Region string
	// External is true when CKPT_S3_ENDPOINT named the server: it cannot
	// be killed or restarted.
	External bool

	bin, dir, addr string
	mu             sync.Mutex
	cmd            *exec.Cmd
	exited         chan struct{}
}

// Start returns the server the tests use: CKPT_S3_ENDPOINT's, or versitygw
// started here. With neither it returns (nil, reason); the reason is an
// error when CKPT_REQUIRE_S3=1.
func Start() (*Server, string, error) {
	if ep := os.Getenv("CKPT_S3_ENDPOINT"); ep != "" {
		region := os.Getenv("AWS_REGION")
		if region == "" {
			region = "us-east-1"
		}
		return &Server{Endpoint: ep, AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
			Region: region, External: true}, "", nil
	}
	required := os.Getenv("CKPT_REQUIRE_S3") == "1"
	bin := findBinary()
	if bin == "" {
		reason := "no S3 test server: run " + Install + " (installs versitygw v1.8.0 into .cache/bin) or set CKPT_S3_ENDPOINT"
		if required {
			return nil, reason, errors.New(reason + " (CKPT_REQUIRE_S3=1)")
		}
		return nil, reason, nil
	}
	dir, err := os.MkdirTemp("", "ckpt-s3test-")
	if err != nil {
		return nil, "", err
	}
	s := &Server{AccessKey: "ckpttest", SecretKey: "ckpttest-secret-key", Region: "us-east-1", bin: bin, dir: dir}
	var last error
	for range 5 {
		if last = s.start(""); last == nil {
			return s, "", nil
		}
	}
	os.RemoveAll(dir)
	return nil, "", fmt.Errorf("starting %s: %w", bin, last)
}

// findBinary returns versitygw from .cache/bin above the working folder,
// or from PATH, or "".
func findBinary() string {
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				p := filepath.Join(d, ".cache", "bin", "versitygw")
				if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
					return p
				}
				if _, err := os.Stat(filepath.Join(d, ".git")); err == nil {
					break // the repository's root
				}
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	return ""
}

// start runs the server on addr (a free port when "") and waits until it
// answers.
func (s *Server) start(addr string) error {
	if addr == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addr = l.Addr().String()
		l.Close()
	}
	cmd := exec.Command(s.bin, "--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region, "--quiet", "--keep-alive", "posix", s.dir)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	endpoint := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("server exited: %s", out.String())
		default:
		}
		resp, err := http.Get(endpoint + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("server did not answer on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.exited, s.addr, s.Endpoint = cmd, exited, addr, endpoint
	s.mu.Unlock()
	return nil
}

// Stop stops a server started here and removes its folder.
func (s *Server) Stop() {
	if s == nil || s.External {
		return
	}
	s.Kill()
	os.RemoveAll(s.dir)
}

// Kill kills the server (its objects stay on disk for Restart).
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		<-exited
	}
}

// Restart starts the killed server again on the same port.
func (s *Server) Restart() error {
	var err error
	for range 50 {
		if err = s.start(s.addr); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// Dir returns the posix backend's folder (a bucket is a folder in it),
// "" for an external server.
func (s *Server) Dir() string { return s.dir }

// Client returns a client for the server: static credentials, path-style
// addressing, checksums only where required, the SDK's own retries, 64
// idle connections kept.
func (s *Server) Client() *s3.Client { return s.ClientAt(s.Endpoint) }

// ClientAt is Client for the server reached at endpoint (a proxy in front
// of it).
func (s *Server) ClientAt(endpoint string) *s3.Client {
	return s3.New(s3.Options{
		Region:                     s.Region,
		BaseEndpoint:               aws.String(endpoint),
		UsePathStyle:               true,
		Credentials:                aws.CredentialsProviderFunc(s.credentials),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		HTTPClient: awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = 64 // as remote.NewS3Client's
		}),
	})
}

func (s *Server) credentials(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey, Source: "s3test"}, nil
}

// Need returns the server, or skips the test (fails it when the server
// was required) with reason.
func Need(t testing.TB, s *Server, reason string, err error) *Server {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		t.Skip(reason)
	}
	return s
}

// NeedLocal is Need for tests that kill or restart the server: they skip
// on an external one.
func NeedLocal(t testing.TB, s *Server, reason string, err error) *Server {
	t.Helper()
	s = Need(t, s, reason, err)
	if s.External {
		t.Skip("the test kills the server: not with CKPT_S3_ENDPOINT")
	}
	return s
}

// NewBucket creates a bucket with a fresh name for one test and returns
// its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "ckpt-test-" + hex.EncodeToString(b[:])
	if _, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// Put stores data under key.
func (s *Server) Put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	_, err := s.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		t.Fatalf("put s3://%s/%s: %v", bucket, key, err)
	}
}

// PutDir stores every regular file under dir as prefix/RELATIVE-PATH.
func (s *Server) PutDir(t testing.TB, bucket, prefix, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if prefix != "" {
			key = prefix + "/" + key
		}
		s.Put(t, bucket, key, data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Delete removes key.
func (s *Server) Delete(t testing.TB, bucket, key string) {
	t.Helper()
	if _, err := s.Client().DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		t.Fatalf("delete s3://%s/%s: %v", bucket, key, err)
	}
}

// Get reads bucket/key whole; nil when it does not exist (404).
func (s *Server) Get(t testing.TB, bucket, key string) []byte {
	t.Helper()
	out, err := s.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		var sc interface{ HTTPStatusCode() int }
		if errors.As(err, &sc) && sc.HTTPStatusCode() == http.StatusNotFound {
			return nil
		}
		t.Fatalf("get s3://%s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("get s3://%s/%s: %v", bucket, key, err)
	}
	return b
}
