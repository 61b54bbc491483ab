package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/ckpt-go/ckpt/remote"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/source"
)

// remoteHelp is the part of the commands' help about remote locations.
const remoteHelp = `Remote locations: s3://BUCKET/PREFIX (a folder, a pipeline root, an index
or a file) and https://HOST/PATH (a .safetensors file or an index; plain
HTTP cannot list folders). S3 credentials and region come from the
standard AWS environment, shared config files and instance roles; the
endpoint of an S3-compatible store from AWS_ENDPOINT_URL_S3 or
AWS_ENDPOINT_URL (path-style addressing when its host is an IP address or
localhost, or with CKPT_S3_PATH_STYLE=1). CKPT_REMOTE_CONCURRENCY and
CKPT_REMOTE_CHUNK (a size) tune ranged reads (16 and 8MiB); CKPT_CACHE=DIR
keeps objects loaded whole in a local cache of at most CKPT_CACHE_SIZE
(default 20GiB).`

var remoteSetup struct {
	sync.Mutex
	s3, opts bool
}

// setupRemote configures package remote for the locations among args: the
// S3 client, built once from the AWS environment when an s3:// location is
// named, and the options from CKPT_REMOTE_* and CKPT_CACHE*.
func setupRemote(args []string) error {
	var s3, any bool
	for _, a := range args {
		switch source.Scheme(a) {
		case "s3":
			s3, any = true, true
		case "http", "https":
			any = true
		}
	}
	if !any {
		return nil
	}
	remoteSetup.Lock()
	defer remoteSetup.Unlock()
	if !remoteSetup.opts {
		opts, err := remoteOptions()
		if err != nil {
			return err
		}
		remote.SetOptions(opts...)
		remoteSetup.opts = true
	}
	if s3 && !remoteSetup.s3 {
		cfg, err := config.LoadDefaultConfig(context.Background())
		if err != nil {
			return fmt.Errorf("AWS configuration: %w", err)
		}
		endpoint := os.Getenv("AWS_ENDPOINT_URL_S3")
		if endpoint == "" {
			endpoint = os.Getenv("AWS_ENDPOINT_URL")
		}
		if cfg.Region == "" {
			cfg.Region = "us-east-1" // S3-compatible stores ignore it; AWS needs AWS_REGION for other regions
		}
		remote.SetS3Client(remote.NewS3Client(cfg, endpoint, s3PathStyle(endpoint)))
		remoteSetup.s3 = true
	}
	return nil
}

// s3PathStyle reports whether the S3 client addresses buckets by path:
// when the endpoint's host is an IP address or localhost (remote.PathStyle)
// or when CKPT_S3_PATH_STYLE=1.
func s3PathStyle(endpoint string) bool {
	return os.Getenv("CKPT_S3_PATH_STYLE") == "1" || remote.PathStyle(endpoint)
}

// remoteOptions reads CKPT_REMOTE_CONCURRENCY, CKPT_REMOTE_CHUNK,
// CKPT_CACHE and CKPT_CACHE_SIZE.
func remoteOptions() ([]remote.Option, error) {
	var opts []remote.Option
	if s := os.Getenv("CKPT_REMOTE_CONCURRENCY"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("CKPT_REMOTE_CONCURRENCY=%q: not a positive number", s)
		}
		opts = append(opts, remote.WithConcurrency(n))
	}
	if s := os.Getenv("CKPT_REMOTE_CHUNK"); s != "" {
		n, err := shard.ParseSize(s)
		if err != nil || n < 64<<10 {
			return nil, fmt.Errorf("CKPT_REMOTE_CHUNK=%q: not a size of at least 64KiB", s)
		}
		opts = append(opts, remote.WithChunkSize(n))
	}
	if dir := os.Getenv("CKPT_CACHE"); dir != "" {
		size := int64(20 << 30)
		if s := os.Getenv("CKPT_CACHE_SIZE"); s != "" {
			n, err := shard.ParseSize(s)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("CKPT_CACHE_SIZE=%q: not a size", s)
			}
			size = n
		}
		c, err := remote.NewCache(dir, size)
		if err != nil {
			return nil, err
		}
		opts = append(opts, remote.WithCache(c))
	}
	return opts, nil
}

// openLocation returns the file system and name of path: (nil, path) for a
// local path. The file system is closed with closeFS.
func openLocation(path string) (fs.FS, string, error) {
	return source.Open(context.Background(), path)
}

// closeFS closes a file system opened by openLocation.
func closeFS(fsys fs.FS) {
	if c, ok := fsys.(io.Closer); ok {
		c.Close()
	}
}
