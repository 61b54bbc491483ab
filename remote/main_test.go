package remote_test

import (
	"os"
	"sync"
	"testing"

	"github.com/ckpt-go/ckpt/internal/s3test"
)

// The package's S3 server: versitygw started on first use by these tests
// (or CKPT_S3_ENDPOINT's), stopped when they end.
var (
	srvOnce   sync.Once
	srv       *s3test.Server
	srvReason string
	srvErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

func server() (*s3test.Server, string, error) {
	srvOnce.Do(func() { srv, srvReason, srvErr = s3test.Start() })
	return srv, srvReason, srvErr
}

func needS3(t testing.TB) *s3test.Server {
	t.Helper()
	s, reason, err := server()
	return s3test.Need(t, s, reason, err)
}

func needLocalS3(t testing.TB) *s3test.Server {
	t.Helper()
	s, reason, err := server()
	return s3test.NeedLocal(t, s, reason, err)
}
