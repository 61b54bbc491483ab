package convert_test

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/internal/s3test"
	"github.com/ckpt-go/ckpt/remote"
)

// The package's S3 server (versitygw, or CKPT_S3_ENDPOINT's), started on
// first use and stopped by TestMain.
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

// needS3 returns the server, with its client registered for s3://
// locations (reading and writing) until the test ends.
func needS3(t testing.TB) *s3test.Server {
	t.Helper()
	s3Once.Do(func() { s3Srv, s3Reason, s3Err = s3test.Start() })
	s := s3test.Need(t, s3Srv, s3Reason, s3Err)
	remote.SetS3Client(s.Client())
	t.Cleanup(func() { remote.SetS3Client(nil); remote.SetSinkOptions() })
	return s
}

// objects lists the keys under prefix/ (recursively) and the multipart
// uploads in progress in bucket.
func objects(t *testing.T, s *s3test.Server, bucket, prefix string) (keys, uploads []string) {
	t.Helper()
	ctx := context.Background()
	p := s3.NewListObjectsV2Paginator(s.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix + "/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			keys = append(keys, strings.TrimPrefix(aws.ToString(o.Key), prefix+"/"))
		}
	}
	out, err := s.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range out.Uploads {
		uploads = append(uploads, aws.ToString(u.Key))
	}
	slices.Sort(keys)
	return keys, uploads
}

// SaveShard and Commit on S3: the same protocol as on a folder, the
// previous checkpoint loaded until the index is written, nothing left but
// the checkpoint.
func TestSaveShardCommitS3(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	loc := "s3://" + bucket + "/run/step"
	saveRanks(t, loc, 1, 3)
	if _, err := convert.Commit(context.Background(), loc, convert.CommitOptions{VerifyData: true}); err != nil {
		t.Fatal(err)
	}
	checkLoaded(t, loc, allTensors(t, 1, 3))

	res := saveRanks(t, loc, 2, 4, 0, 1, 3)
	_, err := convert.Commit(context.Background(), loc, convert.CommitOptions{})
	var ce *convert.Error
	if !errors.As(err, &ce) || ce.Kind != convert.ErrIncomplete || !slices.Equal(ce.Ranks, []int{2}) {
		t.Fatalf("Commit with rank 2 missing: %v", err)
	}
	checkLoaded(t, loc, allTensors(t, 1, 3))
	saveRanks(t, loc, 2, 4, 2)
	cr, err := convert.Commit(context.Background(), loc, convert.CommitOptions{VerifyData: true})
	if err != nil {
		t.Fatal(err)
	}
	checkLoaded(t, loc, allTensors(t, 2, 4))
	if !strings.Contains(res[0].File, ".swap-") {
		t.Errorf("rank 0 wrote %s over a committed checkpoint", res[0].File)
	}
	keys, uploads := objects(t, s, bucket, "run/step")
	if want := sorted(append(slices.Clone(cr.Files), cr.Index)); !slices.Equal(keys, want) || len(uploads) > 0 {
		t.Errorf("objects %v (uploads %v), want %v", keys, uploads, want)
	}
}

// An index written by another writer between Commit's checks and its
// write is never replaced (If-None-Match: *).
func TestCommitS3IndexWrittenMeanwhile(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	loc := "s3://" + bucket + "/ckpt"
	saveRanks(t, loc, 1, 2)
	theirs := []byte(`{"metadata": {}, "weight_map": {}}`)
	restore := convert.SetHook(func(step string) {
		if step == "commit-verified" {
			s.Put(t, bucket, "ckpt/model.safetensors.index.json", theirs)
		}
	})
	_, err := convert.Commit(context.Background(), loc, convert.CommitOptions{})
	restore()
	if !errors.Is(err, convert.ErrConflict) || !errors.Is(err, remote.ErrExists) {
		t.Fatalf("Commit: %v", err)
	}
	if got := getS3(t, s, bucket, "ckpt/model.safetensors.index.json"); string(got) != string(theirs) {
		t.Errorf("the other writer's index was replaced: %s", got)
	}
}

// getS3 reads bucket/key whole; nil when it does not exist.
func getS3(t *testing.T, s *s3test.Server, bucket, key string) []byte {
	t.Helper()
	out, err := s.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		var sc interface{ HTTPStatusCode() int }
		if errors.As(err, &sc) && sc.HTTPStatusCode() == 404 {
			return nil
		}
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
