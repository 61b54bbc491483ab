package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
)

// runOne is `peers run IMPL OP PATH [ITERS]`: one timed run of a Go
// implementation (ckpt, the per-tensor API, or the copy/read baseline),
// printing a RESULT line. OP convert is one load in a fresh process; OP
// steady loads ITERS times in this process and reports the median of the
// iterations after the first.
func runOne(args []string) int {
	if len(args) != 3 && len(args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: peers run ckpt|copy|pertensor|pertensor-into convert|open|steady PATH [ITERS]")
		return 2
	}
	im, op, path := args[0], args[1], args[2]
	var (
		secs    float64
		nbytes  int64
		tensors int
		check   uint64
		err     error
	)
	switch {
	case op == "convert" || op == "steady":
		iters := 1
		if op == "steady" {
			if len(args) != 4 {
				err = fmt.Errorf("steady needs ITERS")
				break
			}
			if iters, err = strconv.Atoi(args[3]); err != nil || iters < 2 {
				err = fmt.Errorf("ITERS %q: want an integer of at least 2", args[3])
				break
			}
		}
		var r timed
		if r, err = runGo(im, path, iters); err == nil {
			secs, tensors, check = steadySeconds(r.secs), r.tensors, r.check
			nbytes, err = sourceBytes(path)
		}
	case im == "ckpt" && op == "open":
		start := time.Now()
		tensors, nbytes, err = openTouch(path)
		secs = time.Since(start).Seconds()
	case im == "copy" && op == "open":
		var files []string
		if files, err = shardFiles(path); err == nil {
			start := time.Now()
			err = readRaw(path, files)
			secs = time.Since(start).Seconds()
		}
	default:
		err = fmt.Errorf("unknown implementation and op %q", im+" "+op)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers run:", err)
		return 1
	}
	fmt.Printf("RESULT impl=%s op=%s seconds=%.6f bytes=%d tensors=%d check=%d\n", im, op, secs, nbytes, tensors, check)
	return 0
}

// sourceBytes returns the tensor data bytes of the checkpoint at path.
func sourceBytes(path string) (int64, error) {
	c, err := shard.Open(path)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var n int64
	for _, name := range c.Names() {
		info, _, _ := c.Info(name)
		n += info.ByteLen()
	}
	return n, nil
}

// openOnly is `peers open-only PATH`: shard.Open and nothing else, the
// memory baseline of the inspect case.
func openOnly(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: peers open-only PATH")
		return 2
	}
	c, err := shard.Open(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers open-only:", err)
		return 1
	}
	fmt.Println(c.Len())
	return 0
}

// rustPeer returns the Rust peer binary: CKPT_PEERS_RUST, or else it
// builds peers/rust with cargo into .cache/rust-target.
func rustPeer(cfg config, stderr io.Writer) (string, error) {
	if cfg.rust != "" {
		return cfg.rust, nil
	}
	target, err := filepath.Abs(filepath.Join(cfg.cache, "rust-target"))
	if err != nil {
		return "", err
	}
	c := exec.Command("cargo", "build", "--release", "--quiet", "--manifest-path", filepath.Join("peers", "rust", "Cargo.toml"))
	c.Env = append(os.Environ(), "CARGO_TARGET_DIR="+target)
	c.Stdout, c.Stderr = stderr, stderr
	fmt.Fprintln(stderr, "peers: building the Rust peer (cargo build --release)")
	if err := c.Run(); err != nil {
		return "", err
	}
	return filepath.Join(target, "release", "ckpt-peer"), nil
}

// ckptCommand returns the ckpt command binary: CKPT_PEERS_CKPT, or else it
// builds ../cmd/ckpt into .cache.
func ckptCommand(cfg config, stderr io.Writer) (string, error) {
	if cfg.ckptBin != "" {
		return cfg.ckptBin, nil
	}
	bin, err := filepath.Abs(filepath.Join(cfg.cache, "ckpt"))
	if err != nil {
		return "", err
	}
	c := exec.Command("go", "build", "-o", bin, "github.com/ckpt-go/ckpt/cmd/ckpt")
	c.Stdout, c.Stderr = stderr, stderr
	if err := c.Run(); err != nil {
		return "", err
	}
	return bin, nil
}

// writeManyTiny writes a file of n one-byte U8 tensors named
// model.layers.I.w: a header of about 75 bytes a tensor.
func writeManyTiny(path string, n int) error {
	specs := make([]safetensors.TensorSpec, n)
	for i := range specs {
		specs[i] = safetensors.TensorSpec{Name: fmt.Sprintf("model.layers.%d.w", i), DType: dtype.U8, Shape: []int64{1}}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := safetensors.NewWriter(bw, specs, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	for _, s := range w.Order() {
		if err := w.WriteTensor(s.Name, []byte{1}); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

var (
	maxRSS  = regexp.MustCompile(`Maximum resident set size \(kbytes\): (\d+)`)
	elapsed = regexp.MustCompile(`Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)`)
)

// timeV runs args under /usr/bin/time -v with stdout discarded and returns
// the wall time and the maximum RSS in bytes.
func timeV(args ...string) (float64, int64, error) {
	c := exec.Command("/usr/bin/time", append([]string{"-v"}, args...)...)
	var errb bytes.Buffer
	c.Stdout, c.Stderr = io.Discard, &errb
	if err := c.Run(); err != nil {
		return 0, 0, fmt.Errorf("%v: %v: %s", args, err, errb.String())
	}
	return parseTimeV(errb.String())
}

// parseTimeV reads the wall time (seconds) and the maximum RSS (bytes)
// from the report of GNU time -v.
func parseTimeV(report string) (float64, int64, error) {
	m := maxRSS.FindStringSubmatch(report)
	e := elapsed.FindStringSubmatch(report)
	if m == nil || e == nil {
		return 0, 0, fmt.Errorf("no time -v figures in %q", report)
	}
	kb, _ := strconv.ParseInt(m[1], 10, 64)
	var h float64
	if e[1] != "" {
		h, _ = strconv.ParseFloat(e[1], 64)
	}
	mins, _ := strconv.ParseFloat(e[2], 64)
	secs, _ := strconv.ParseFloat(e[3], 64)
	return h*3600 + mins*60 + secs, kb << 10, nil
}

// inspectCase measures `ckpt inspect --json` against open-only on a file of
// cfg.inspectN tiny tensors.
func inspectCase(w, stderr io.Writer, cfg config, dir, self string) error {
	bin, err := ckptCommand(cfg, stderr)
	if err != nil {
		return fmt.Errorf("building ckpt: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("tiny-%d.safetensors", cfg.inspectN))
	if h, err := safetensors.ReadHeaderFile(path); err != nil || len(h.Tensors) != cfg.inspectN {
		if err := writeManyTiny(path, cfg.inspectN); err != nil {
			return err
		}
	}
	h, err := safetensors.ReadHeaderFile(path)
	if err != nil {
		return err
	}
	var ot, orss, it, irss []float64
	for r := range cfg.runs {
		t1, m1, err := timeV(self, "open-only", path)
		if err != nil {
			return err
		}
		t2, m2, err := timeV(bin, "inspect", "--json", path)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "  inspect run %d: open-only %.2f s %d MiB, inspect --json %.2f s %d MiB\n", r+1, t1, m1>>20, t2, m2>>20)
		ot, orss, it, irss = append(ot, t1), append(orss, float64(m1)), append(it, t2), append(irss, float64(m2))
	}
	fmt.Fprintf(w, "**inspect** — %d tensors, header %.1f MB: wall time and max RSS (`/usr/bin/time -v`, median)\n\n", cfg.inspectN, float64(h.HeaderLen)/1e6)
	fmt.Fprintln(w, "| program | time | max RSS | RSS × open-only |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	fmt.Fprintf(w, "| baseline: shard.Open only | %s | %.0f MiB | 1.00× |\n", fmtDur(median(ot)), median(orss)/(1<<20))
	fmt.Fprintf(w, "| ckpt inspect --json | %s | %.0f MiB | %.2f× |\n", fmtDur(median(it)), median(irss)/(1<<20), median(irss)/median(orss))
	fmt.Fprintln(w)
	return nil
}
