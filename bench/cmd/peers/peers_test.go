package main

import (
	"encoding/binary"
	"math"
	"testing"
)

// The fixtures are valid checkpoints, and ckpt's side and the copy
// baseline see the same tensors: every F32 value ckpt produces is exactly
// its BF16 source (bits << 16), and the sampled checksums agree.
func TestFixturesAndGoSides(t *testing.T) {
	cfg := config{openTensors: 300, many: 20, manyKiB: 4, oneMiB: 1, setMiB: 2, bigMiB: 4, bigShards: 3}
	needed := map[string]bool{"open": true, "many": true, "one": true, "set": true, "big": true}
	fx, err := makeFixtures(t.TempDir(), cfg, needed)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"many", "one", "set", "big"} {
		f := fx[name]
		got, err := loadAllAsF32(f.path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		src, err := copyAll(f.path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != f.tensors || len(src) != f.tensors {
			t.Fatalf("%s: %d converted and %d copied tensors, want %d", name, len(got), len(src), f.tensors)
		}
		var ck, cc uint64
		var total int64
		for _, b := range src {
			cc += bytesChecksum(b)
			total += int64(len(b))
		}
		for n, v := range got {
			ck += checksum(v)
			for i, x := range v {
				if x != x || math.IsInf(float64(x), 0) {
					t.Fatalf("%s: tensor %d, element %d = %v, want finite data", name, n, i, x)
				}
			}
		}
		if ck != cc || total != f.bytes {
			t.Errorf("%s: checksum %d vs copy %d, %d bytes vs %d", name, ck, cc, total, f.bytes)
		}
		// Element by element for one file: F32 bits are the BF16 bits << 16.
		if name == "one" {
			b := src[0]
			for _, v := range got {
				for i, x := range v {
					if want := uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16; math.Float32bits(x) != want {
						t.Fatalf("element %d: %#x, want %#x", i, math.Float32bits(x), want)
					}
				}
			}
		}
	}
	n, _, err := openTouch(fx["open"].path)
	if err != nil || n != cfg.openTensors {
		t.Fatalf("openTouch: %d tensors, %v; want %d", n, err, cfg.openTensors)
	}
	files, err := shardFiles(fx["open"].path)
	if err != nil || len(files) != 2 {
		t.Fatalf("shardFiles: %v, %v", files, err)
	}
	if err := readRaw(fx["open"].path, files); err != nil {
		t.Fatal(err)
	}
}

func TestParseTimeV(t *testing.T) {
	report := "\tCommand being timed: \"x\"\n\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02.50\n\tMaximum resident set size (kbytes): 2048\n"
	secs, rss, err := parseTimeV(report)
	if err != nil || secs != 62.5 || rss != 2<<20 {
		t.Errorf("parseTimeV = %v, %d, %v; want 62.5, 2 MiB", secs, rss, err)
	}
	secs, _, err = parseTimeV("Elapsed (wall clock) time (h:mm:ss or m:ss): 1:00:01\nMaximum resident set size (kbytes): 1\n")
	if err != nil || secs != 3601 {
		t.Errorf("h:mm:ss = %v, %v", secs, err)
	}
	if _, _, err := parseTimeV("nothing"); err == nil {
		t.Error("no error for a report without figures")
	}
}

// Every Go implementation, fresh and steady, converts every tensor of every
// conversion fixture to the copy baseline's checksum.
func TestGoImplsAgree(t *testing.T) {
	cfg := config{many: 20, manyKiB: 4, oneMiB: 1, setMiB: 2, bigMiB: 4, bigShards: 3, tiny: 300}
	needed := map[string]bool{"many": true, "one": true, "set": true, "tiny": true}
	fx, err := makeFixtures(t.TempDir(), cfg, needed)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range fx {
		want, err := runGo("copy", f.path, 1)
		if err != nil || want.tensors != f.tensors {
			t.Fatalf("%s: copy: %d tensors, %v", name, want.tensors, err)
		}
		for _, im := range goImpls {
			for _, iters := range []int{1, 3} {
				r, err := runGo(im, f.path, iters)
				if err != nil {
					t.Fatalf("%s: %s × %d: %v", name, im, iters, err)
				}
				if r.tensors != f.tensors || r.check != want.check || len(r.secs) != iters {
					t.Errorf("%s: %s × %d: %d tensors, check %d, %d times; want %d, %d", name, im, iters, r.tensors, r.check, len(r.secs), f.tensors, want.check)
				}
			}
		}
	}
}
