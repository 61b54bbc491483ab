// Command peers measures ckpt against its non-Go peers on the same files in
// the same run, each as a ratio to a baseline measured alongside:
//
//   - open: open a 2-shard index and look every tensor up; ckpt
//     (shard.Open + Tensor), the Rust safetensors crate (serde_json index,
//     mmap, SafeTensors::deserialize, tensor), Python safetensors (safe_open,
//     get_slice); baseline: reading the index and header bytes.
//   - many, one, set, big, tiny: every tensor of a BF16 checkpoint
//     converted to F32 on all cores; ckpt (loadAllAsF32), Rust (half +
//     rayon), Python + NumPy (safe_open(framework="numpy"),
//     .astype(np.float32), one core as its users run it); the per-tensor Go
//     API a user writes first (pertensor: safetensors.Open or shard.Open,
//     then Tensor.Float32s per tensor in a loop; pertensor-into: the same
//     with Tensor.ConvertTo into one reused buffer); baseline: a parallel Go
//     copy of the same source bytes into fresh buffers. Fixtures: 1,000
//     tensors of 128 KiB in one file; one 256 MiB tensor; a 2-shard 512 MiB
//     set; a 4-shard 1 GiB set; 100,000 tensors of 4×4 in one file.
//   - inspect: max RSS and time of `ckpt inspect --json` against a program
//     that only opens the same 1,000,000-tensor file (shard.Open).
//
// Every measurement is a fresh process (the peers' own programs, or this
// one re-executed as `peers run IMPL OP PATH`) that times only the work,
// not its start-up; so every implementation allocates its output from a
// fresh address space, as a real load does. In the steady mode
// (CKPT_PEERS_MODES=steady) each process instead converts the same
// checkpoint CKPT_PEERS_ITERS times and reports the median of the
// iterations after the first: ckpt loads one Model again and again with
// IntoArena into one reused Arena (opened before the timer); the copy
// baseline copies into the same buffers; the per-tensor API, Rust and
// Python run their loop again (open included), dropping the previous
// iteration's outputs, so their allocators reuse that memory where they do. The files are in the page cache
// (written just before). Implementations take turns within each round;
// the table gives medians over the rounds. Conversion outputs are
// cross-checked with a sampled checksum of the F32 bits (the copy baseline
// derives it from the BF16 source bits).
//
// Run it from bench/ (it builds the Rust peer with cargo into .cache/):
//
//	go run ./cmd/peers
//
// Environment (sizes for a small machine; defaults in parentheses):
//
//	CKPT_PEERS_CASES       cases to run (open,many,one,set,big,inspect; tiny on request)
//	CKPT_PEERS_MODES       fresh, steady or both, for the conversion cases (fresh)
//	CKPT_PEERS_ITERS       loads per process in the steady mode (7)
//	CKPT_PEERS_RUNS        rounds per case (5)
//	CKPT_PEERS_DIR         keep fixtures here and reuse them (a temp dir, removed)
//	CKPT_PEERS_OPEN        tensors of the open case (10000)
//	CKPT_PEERS_MANY        tensors of the many case (1000), CKPT_PEERS_MANY_KIB each (128)
//	CKPT_PEERS_ONE_MIB     the one-tensor case (256)
//	CKPT_PEERS_SET_MIB     the 2-shard set (512)
//	CKPT_PEERS_BIG_MIB     the multi-shard set (1024), CKPT_PEERS_BIG_SHARDS shards (4)
//	CKPT_PEERS_TINY        tensors of 4×4 of the tiny case (100000)
//	CKPT_PEERS_IMPLS       implementations to run (all that are available)
//	CKPT_PEERS_INSPECT     tensors of the inspect case (1000000)
//	CKPT_PEERS_PYTHON      Python with safetensors, numpy, ml_dtypes (../interop/.venv/bin/python; "off")
//	CKPT_PEERS_RUST        a built peers/rust binary ("" builds it; "off")
//	CKPT_PEERS_CKPT        a ckpt command binary for inspect ("" builds ../cmd/ckpt)
package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

type config struct {
	cases, modes, impls          []string
	runs, iters, tiny            int
	dir                          string
	openTensors, many, inspectN  int
	manyKiB, oneMiB, setMiB      int64
	bigMiB                       int64
	bigShards                    int
	python, rust, ckptBin, cache string
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "run":
			os.Exit(runOne(os.Args[2:]))
		case "open-only":
			os.Exit(openOnly(os.Args[2:]))
		}
	}
	if err := drive(os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func envInt(name string, def int64) int64 {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "peers: %s=%q is not a positive integer\n", name, v)
			os.Exit(2)
		}
		return n
	}
	return def
}

func loadConfig() config {
	return config{
		cases:       strings.Split(cmp.Or(os.Getenv("CKPT_PEERS_CASES"), "open,many,one,set,big,inspect"), ","),
		modes:       strings.Split(cmp.Or(os.Getenv("CKPT_PEERS_MODES"), "fresh"), ","),
		impls:       strings.Split(os.Getenv("CKPT_PEERS_IMPLS"), ","),
		runs:        int(envInt("CKPT_PEERS_RUNS", 5)),
		iters:       int(envInt("CKPT_PEERS_ITERS", 7)),
		tiny:        int(envInt("CKPT_PEERS_TINY", 100_000)),
		dir:         os.Getenv("CKPT_PEERS_DIR"),
		openTensors: int(envInt("CKPT_PEERS_OPEN", 10000)),
		many:        int(envInt("CKPT_PEERS_MANY", 1000)),
		manyKiB:     envInt("CKPT_PEERS_MANY_KIB", 128),
		oneMiB:      envInt("CKPT_PEERS_ONE_MIB", 256),
		setMiB:      envInt("CKPT_PEERS_SET_MIB", 512),
		bigMiB:      envInt("CKPT_PEERS_BIG_MIB", 1024),
		bigShards:   int(envInt("CKPT_PEERS_BIG_SHARDS", 4)),
		inspectN:    int(envInt("CKPT_PEERS_INSPECT", 1_000_000)),
		python:      cmp.Or(os.Getenv("CKPT_PEERS_PYTHON"), filepath.Join("..", "interop", ".venv", "bin", "python")),
		rust:        os.Getenv("CKPT_PEERS_RUST"),
		ckptBin:     os.Getenv("CKPT_PEERS_CKPT"),
		cache:       ".cache",
	}
}

// impl is one implementation of an op: the command that runs it once
// (extra: the steady op's iteration count).
type impl struct {
	name string
	cmd  func(op, path string, extra ...string) *exec.Cmd
}

// result is what one run printed.
type result struct {
	seconds float64
	bytes   int64
	tensors int
	check   string
}

var resultLine = regexp.MustCompile(`(?m)^RESULT impl=(\S+) op=(\S+) seconds=([\d.e+-]+) bytes=(\d+) tensors=(\d+) check=(\d+)$`)

func runImpl(im impl, op, path string, extra ...string) (result, error) {
	c := im.cmd(op, path, extra...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return result{}, fmt.Errorf("%s %s: %v: %s", im.name, op, err, strings.TrimSpace(errb.String()))
	}
	m := resultLine.FindStringSubmatch(out.String())
	if m == nil {
		return result{}, fmt.Errorf("%s %s: no RESULT line in %q", im.name, op, out.String())
	}
	secs, _ := strconv.ParseFloat(m[3], 64)
	b, _ := strconv.ParseInt(m[4], 10, 64)
	n, _ := strconv.Atoi(m[5])
	return result{seconds: secs, bytes: b, tensors: n, check: m[6]}, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func drive(stdout, stderr io.Writer) error {
	cfg := loadConfig()
	if _, err := os.Stat(filepath.Join("peers", "rust", "Cargo.toml")); err != nil {
		return errors.New("run from the bench folder (go run ./cmd/peers)")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	needed := map[string]bool{}
	for _, c := range cfg.cases {
		needed[c] = true
	}
	dir := cfg.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "ckpt-peers-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	// The implementations.
	var impls []impl
	for _, name := range goImpls {
		impls = append(impls, impl{name, func(op, path string, extra ...string) *exec.Cmd {
			return exec.Command(self, append([]string{"run", name, op, path}, extra...)...)
		}})
	}
	if cfg.rust != "off" {
		bin, err := rustPeer(cfg, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "peers: no Rust peer: %v\n", err)
		} else {
			impls = append(impls, impl{"rust", func(op, path string, extra ...string) *exec.Cmd {
				return exec.Command(bin, append([]string{op, path}, extra...)...)
			}})
		}
	}
	if cfg.python != "off" {
		if err := exec.Command(cfg.python, "-c", "import safetensors, numpy, ml_dtypes").Run(); err != nil {
			fmt.Fprintf(stderr, "peers: no Python peer (%s with safetensors, numpy, ml_dtypes): %v\n", cfg.python, err)
		} else {
			script, _ := filepath.Abs(filepath.Join("peers", "python", "peer.py"))
			py := cfg.python
			impls = append(impls, impl{"python", func(op, path string, extra ...string) *exec.Cmd {
				return exec.Command(py, append([]string{script, op, path}, extra...)...)
			}})
		}
	}

	if cfg.impls[0] != "" {
		// The copy baseline always runs: the checksums and ratios need it.
		impls = slices.DeleteFunc(impls, func(im impl) bool {
			return im.name != "copy" && !slices.Contains(cfg.impls, im.name)
		})
	}
	fmt.Fprintf(stderr, "peers: fixtures in %s\n", dir)
	fixtures, err := makeFixtures(dir, cfg, needed)
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "Runs: %d (medians). Modes: %s (steady: %d loads per process, median of the last %d). Implementations: %s. %s\n\n",
		cfg.runs, strings.Join(cfg.modes, ","), cfg.iters, cfg.iters-1, implNames(impls), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	var failed bool
	for _, cs := range cfg.cases {
		switch cs {
		case "open":
			if err := openCase(stdout, stderr, cfg, impls, fixtures["open"]); err != nil {
				return err
			}
		case "many", "one", "set", "big", "tiny":
			for _, mode := range cfg.modes {
				if mode != "fresh" && mode != "steady" {
					return fmt.Errorf("unknown mode %q", mode)
				}
				ok, err := convertCase(stdout, stderr, cfg, impls, cs, mode, fixtures[cs])
				if err != nil {
					return err
				}
				failed = failed || !ok
			}
		case "inspect":
			if err := inspectCase(stdout, stderr, cfg, dir, self); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown case %q", cs)
		}
	}
	if failed {
		return errors.New("implementations disagree on the converted values (see MISMATCH above)")
	}
	return nil
}

func implNames(impls []impl) string {
	var s []string
	for _, im := range impls {
		s = append(s, im.name)
	}
	return strings.Join(s, ", ")
}

// rounds runs op on path with every implementation cfg.runs times, taking
// turns (the first implementation of each round rotates), and returns the
// results per implementation.
func rounds(stderr io.Writer, cfg config, impls []impl, op, path string, extra ...string) (map[string][]result, error) {
	res := map[string][]result{}
	for r := range cfg.runs {
		for k := range impls {
			im := impls[(r+k)%len(impls)]
			rr, err := runImpl(im, op, path, extra...)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(stderr, "  %s %s %s run %d: %.4f s\n", filepath.Base(path), op, im.name, r+1, rr.seconds)
			res[im.name] = append(res[im.name], rr)
		}
	}
	return res, nil
}

func seconds(rs []result) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r.seconds
	}
	return out
}

func fmtDur(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.2f ms", s*1e3)
	}
	return fmt.Sprintf("%.1f µs", s*1e6)
}

func openCase(w, stderr io.Writer, cfg config, impls []impl, fx fixture) error {
	res, err := rounds(stderr, cfg, impls, "open", fx.path)
	if err != nil {
		return err
	}
	base := median(seconds(res["copy"]))
	ck := median(seconds(res["ckpt"]))
	fmt.Fprintf(w, "**open** — %d-tensor 2-shard index: open, look every tensor up, close (median time)\n\n", fx.tensors)
	fmt.Fprintln(w, "| implementation | time | × baseline | ckpt speed-up |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	for _, im := range impls {
		m := median(seconds(res[im.name]))
		name := im.name
		if name == "copy" {
			name = "baseline: read index + header bytes"
		}
		sp := "—"
		if im.name != "copy" && im.name != "ckpt" {
			sp = fmt.Sprintf("%.2f×", m/ck)
		}
		fmt.Fprintf(w, "| %s | %s | %.2f× | %s |\n", name, fmtDur(m), m/base, sp)
	}
	fmt.Fprintln(w)
	return nil
}

func convertCase(w, stderr io.Writer, cfg config, impls []impl, name, mode string, fx fixture) (bool, error) {
	var res map[string][]result
	var err error
	if mode == "steady" {
		res, err = rounds(stderr, cfg, impls, "steady", fx.path, strconv.Itoa(cfg.iters))
	} else {
		res, err = rounds(stderr, cfg, impls, "convert", fx.path)
	}
	if err != nil {
		return false, err
	}
	ok := true
	want := res["copy"][0].check
	for _, im := range impls {
		for _, r := range res[im.name] {
			if r.check != want || r.tensors != fx.tensors {
				fmt.Fprintf(w, "MISMATCH: %s: %s gave %d tensors, check %s; copy: %d, %s\n", name, im.name, r.tensors, r.check, fx.tensors, want)
				ok = false
			}
		}
	}
	gbs := func(s float64) float64 { return float64(fx.bytes) / s / 1e9 }
	base := median(seconds(res["copy"]))
	ck := median(seconds(res["ckpt"]))
	fmt.Fprintf(w, "**%s, %s** — BF16→F32 of %d tensors, %.1f MiB of BF16 in %s (GB/s of source bytes, median)\n\n",
		name, mode, fx.tensors, float64(fx.bytes)/(1<<20), filepath.Base(fx.path))
	fmt.Fprintln(w, "| implementation | time | GB/s | × copy | ckpt speed-up |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: |")
	fastest, fastestName := 0.0, ""
	for _, im := range impls {
		m := median(seconds(res[im.name]))
		label := im.name
		if label == "copy" {
			label = "baseline: parallel copy"
		}
		sp := "—"
		if im.name != "copy" && im.name != "ckpt" {
			sp = fmt.Sprintf("%.2f×", m/ck)
		}
		if !isGoImpl(im.name) && (fastestName == "" || m < fastest) {
			fastest, fastestName = m, im.name
		}
		fmt.Fprintf(w, "| %s | %s | %.2f | %.2f× | %s |\n", label, fmtDur(m), gbs(m), base/m, sp)
	}
	fmt.Fprintln(w)
	if fastestName != "" {
		fmt.Fprintf(w, "ckpt vs the fastest peer (%s): %.2f× its speed; pertensor %.2f×, pertensor-into %.2f×.\n\n",
			fastestName, fastest/ck, fastest/median(seconds(res["pertensor"])), fastest/median(seconds(res["pertensor-into"])))
	}
	return ok, nil
}
