package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/executor"
)

func TestParseChecksArguments(t *testing.T) {
	for _, bad := range [][]string{{"-size", "0"}, {"-size", "x"}, {"-shards", "0"}, {"-readers", "0"}, {"-runs", "0"}, {"-dim", "100"}, {"extra"}} {
		if _, err := parse(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	c, err := parse([]string{"-size", "2MiB", "-shards", "2"}, io.Discard)
	if err != nil || c.size != 2<<20 || c.readers != 16 || !c.cold {
		t.Fatalf("%+v %v", c, err)
	}
}

// The generated checkpoint opens with the loader as a 4-shard BF16 model.
func TestGenerate(t *testing.T) {
	c, _ := parse([]string{"-size", "4MiB", "-dir", t.TempDir()}, io.Discard)
	files, err := generate(c)
	if err != nil || len(files) != 4 {
		t.Fatal(files, err)
	}
	m, err := ckpt.Open(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, _ := m.Plan()
	if got := p.TotalMappedBytes; got < 4<<20-4096 || got > 4<<20 {
		t.Errorf("%d bytes of tensors", got)
	}
}

// Without a GPU the program says why, after checking its arguments.
func TestRunWithoutGPU(t *testing.T) {
	c, _ := parse([]string{"-size", "1MiB", "-dir", t.TempDir()}, io.Discard)
	var out bytes.Buffer
	err := run(context.Background(), c, &out)
	if err == nil {
		if os.Getenv("CKPT_REQUIRE_GPU") == "" {
			t.Log(out.String())
		}
		return
	}
	if !errors.Is(err, executor.ErrUnavailable) || !strings.Contains(err.Error(), "cannot start") {
		t.Errorf("%v", err)
	}
}
