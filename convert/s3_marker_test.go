package convert_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-go/ckpt/convert"
)

// marker is an IncompleteName as another save would have written it.
func marker(t *testing.T, host string, pid int, at time.Time) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"format": "ckpt.incomplete/v1", "state": "saving", "seq": 1,
		"at": at.UTC(), "owner": "someone", "host": host, "pid": pid})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A name held by a running save (its marker fresh, or of a process of
// this host that runs) is refused with ErrConflict that says who holds
// it; one whose holder stopped (a process of this host that is gone, or a
// marker of another host not refreshed for a minute) is taken over.
func TestSaveS3MarkerHolder(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	host, _ := os.Hostname()
	dir := "s3://" + bucket + "/run"
	save := func(name string) error {
		_, err := convert.Save(context.Background(), dir, allTensors(t, 7, 2), convert.SaveOptions{Name: name, MaxShardSize: 600})
		return err
	}
	for _, c := range []struct {
		name    string
		marker  []byte
		running bool
	}{
		{"fresh-other-host", marker(t, "elsewhere.example", 1234, time.Now()), true},
		{"running-here", marker(t, host, os.Getpid(), time.Now().Add(-time.Hour)), false}, // stale: a pid reused
		{"running-here-fresh", marker(t, host, os.Getpid(), time.Now()), true},
		{"stopped-here", marker(t, host, 1<<22+1, time.Now()), false},
		{"stale-other-host", marker(t, "elsewhere.example", 1234, time.Now().Add(-2*time.Minute)), false},
	} {
		s.Put(t, bucket, "run/"+c.name+"/"+convert.IncompleteName, c.marker)
		s.Put(t, bucket, "run/"+c.name+"/model-00001-of-00002.safetensors", []byte("what the other save wrote"))
		err := save(c.name)
		if c.running {
			if !errors.Is(err, convert.ErrConflict) || !strings.Contains(err.Error(), "holds this name") {
				t.Errorf("%s: Save over a running save's name: %v", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Save over a stopped save's name: %v", c.name, err)
			continue
		}
		checkLoaded(t, dir+"/"+c.name, allTensors(t, 7, 2))
	}
}

// A save whose marker another save replaced (it took the name over)
// stops before its manifest, with ErrConflict; the other save's marker
// stays.
func TestSaveS3TakenOver(t *testing.T) {
	s := needS3(t)
	bucket := s.NewBucket(t)
	theirs := marker(t, "elsewhere.example", 99, time.Now())
	restore := convert.SetHook(func(step string) {
		if step == "written" {
			s.Put(t, bucket, "run/c/"+convert.IncompleteName, theirs)
		}
	})
	defer restore()
	_, err := convert.Save(context.Background(), "s3://"+bucket+"/run", allTensors(t, 8, 2), convert.SaveOptions{Name: "c", MaxShardSize: 600})
	if !errors.Is(err, convert.ErrConflict) || !strings.Contains(err.Error(), "took the name over") {
		t.Fatalf("Save taken over: %v", err)
	}
	if got := s.Get(t, bucket, "run/c/"+convert.IncompleteName); string(got) != string(theirs) {
		t.Errorf("the other save's marker was replaced: %s", got)
	}
	keys, _ := objects(t, s, bucket, "run/c")
	for _, k := range keys {
		if k == "checkpoint.json" {
			t.Errorf("a manifest was written: %v", keys)
		}
	}
}
