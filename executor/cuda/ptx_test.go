package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPTXHeaders checks every embedded PTX file against the policy: the
// baseline targets sm_75 with ISA 8.0 (loads on CUDA 12.0 drivers and
// later); variants target the hardware that pays for them, and an FP8
// conversion variant declares an ISA that has those instructions on its
// target (8.1 on sm_89, 7.8 on sm_90); no file declares a newer ISA than it
// needs. It also checks that the files on disk are the embedded ones and
// that every kernel the executor launches is an entry of its module.
func TestPTXHeaders(t *testing.T) {
	if len(allModules) < 2 {
		t.Fatal("no variants")
	}
	for _, m := range allModules {
		v, target, err := ptxHeader(m.src)
		if err != nil {
			t.Fatalf("%s: %v", m.file, err)
		}
		if want := "sm_" + itoa(m.target); target != want {
			t.Errorf("%s: .target %s, want %s", m.file, target, want)
		}
		if v != m.version {
			t.Errorf("%s: .version %s, want %s", m.file, v, m.version)
		}
		isa := isaNumber(v)
		fp8 := strings.Contains(m.src, ".e4m3x2") || strings.Contains(m.src, ".e5m2x2")
		switch {
		case m.target == minCC && isa > 80:
			t.Errorf("%s: the baseline must load on CUDA 12.0 drivers (ISA 8.0), has %s", m.file, v)
		case fp8 && m.target == 89 && isa < 81:
			t.Errorf("%s: FP8 conversions on sm_89 need ISA 8.1, has %s", m.file, v)
		case fp8 && m.target >= 90 && isa < 78:
			t.Errorf("%s: FP8 conversions on sm_90 need ISA 7.8, has %s", m.file, v)
		case fp8 && m.target < 89:
			t.Errorf("%s: FP8 conversion instructions on sm_%d, which lacks them", m.file, m.target)
		case !fp8 && m.target != minCC && m.target != 80:
			t.Errorf("%s: a variant for sm_%d that uses no FP8 conversion", m.file, m.target)
		case isa > 80 && !(fp8 && m.target == 89):
			t.Errorf("%s: ISA %s is newer than needed (8.0 loads on every CUDA 12 driver)", m.file, v)
		}
		if strings.Contains(m.src, "mma.sync") && m.target < 80 {
			t.Errorf("%s: mma.sync BF16 needs sm_80", m.file)
		}
		disk, err := os.ReadFile(m.file)
		if err != nil || string(disk) != m.src {
			t.Errorf("%s: the embedded PTX is not the file on disk (%v)", m.file, err)
		}
		for _, k := range m.kernels {
			if !regexp.MustCompile(`\.entry\s+` + k + `\(`).MatchString(m.src) {
				t.Errorf("%s: no entry %s", m.file, k)
			}
		}
	}
	// Every .ptx file in kernels/ is embedded and checked.
	files, _ := filepath.Glob("kernels/*.ptx")
	for _, f := range files {
		if !slices.ContainsFunc(allModules, func(m ptxModule) bool { return m.file == f }) {
			t.Errorf("%s is not embedded", f)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

var recordPTXSources = flag.Bool("record-ptx-sources", false,
	"TestPTXSources writes the hash of the current sources into each PTX file's header instead of checking it: "+
		"only for PTX known to be generated from these sources (kernels/gen.sh records it itself)")

// ptxGen is one "gen OUT SRC ARCH VERSION [FLAGS...]" line of kernels/gen.sh.
type ptxGen struct {
	out, src, arch, version string
	extra                   []string
}

// flags returns the nvcc flags gen.sh compiles g with.
func (g ptxGen) flags(nvccflags string) string {
	return strings.Join(append([]string{nvccflags, "-arch=compute_" + g.arch}, g.extra...), " ")
}

// readGenSh returns gen.sh's nvccflags and its gen lines.
func readGenSh() (nvccflags string, gens []ptxGen, err error) {
	b, err := os.ReadFile("kernels/gen.sh")
	if err != nil {
		return "", nil, err
	}
	m := regexp.MustCompile(`(?m)^nvccflags="([^"\n$\\]*)"$`).FindSubmatch(b)
	if m == nil {
		return "", nil, fmt.Errorf("kernels/gen.sh: no nvccflags=\"...\" line")
	}
	for _, g := range regexp.MustCompile(`(?m)^gen ([^ \n]+) ([^ \n]+) ([0-9]+) ([0-9.]+)((?: [^ \n$"'\\]+)*)$`).FindAllSubmatch(b, -1) {
		gens = append(gens, ptxGen{string(g[1]), string(g[2]), string(g[3]), string(g[4]), strings.Fields(string(g[5]))})
	}
	if len(gens) == 0 {
		return "", nil, fmt.Errorf("kernels/gen.sh: no gen lines")
	}
	return string(m[1]), gens, nil
}

// sourcesHash is gen.sh's sources_hash: the SHA-256 of the flags, the
// .version, the .cu file and numerics.h, each file framed by its name and
// size.
func sourcesHash(src, flags, version string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "ckpt kernels/gen.sh v1\nflags: %s\nversion: %s\n", flags, version)
	for _, f := range []string{src, "numerics.h"} {
		b, err := os.ReadFile(filepath.Join("kernels", f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "file %s %d\n", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sourcesLineRE matches the header line where gen.sh records the hash.
var sourcesLineRE = regexp.MustCompile(`(?m)^// Sources: sha256 .*\n`)

// TestPTXSources checks that each committed PTX file was generated from
// the current sources: the hash its header records (written by gen.sh)
// must be that of the .cu file, numerics.h, and the flags and .version
// gen.sh compiles it with today. Without nvcc at hand a change to a kernel
// source would otherwise ship the old PTX: the emulator and the host tests
// build from the sources and would not notice.
func TestPTXSources(t *testing.T) {
	nvccflags, gens, err := readGenSh()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range allModules {
		if !slices.ContainsFunc(gens, func(g ptxGen) bool { return "kernels/"+g.out == m.file }) {
			t.Errorf("%s: kernels/gen.sh does not generate it", m.file)
		}
	}
	for _, g := range gens {
		file := "kernels/" + g.out
		i := slices.IndexFunc(allModules, func(m ptxModule) bool { return m.file == file })
		if i < 0 {
			t.Errorf("kernels/gen.sh generates %s, which the package does not embed", file)
			continue
		}
		flags := g.flags(nvccflags)
		sum, err := sourcesHash(g.src, flags, g.version)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("// Sources: sha256 %s of %s, numerics.h, nvcc %s.\n", sum, g.src, flags)
		src := allModules[i].src
		if *recordPTXSources {
			if src, err = recordSources(file, want); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: recorded %s", file, strings.TrimSpace(want))
		}
		got := sourcesLineRE.FindString(src)
		switch {
		case got == "":
			t.Errorf("%s records no hash of its sources (a \"// Sources: sha256 ...\" header line): "+
				"the PTX is stale or predates the hash: regenerate with `go generate ./executor/cuda/` (kernels/gen.sh, needs nvcc)", file)
		case got != want:
			t.Errorf("the PTX is stale: regenerate with `go generate ./executor/cuda/` (kernels/gen.sh, needs nvcc): "+
				"%s was generated from\n\t%s\nbut %s, numerics.h and gen.sh's flags now give\n\t%s",
				file, strings.TrimSpace(got), g.src, strings.TrimSpace(want))
		}
	}
}

// recordSources writes line into file's header, in place of the one there
// or after the first two lines (gen.sh's), and returns the new contents.
func recordSources(file, line string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	s := string(b)
	if loc := sourcesLineRE.FindStringIndex(s); loc != nil {
		s = s[:loc[0]] + line + s[loc[1]:]
	} else {
		first, rest, _ := strings.Cut(s, "\n")
		second, rest, _ := strings.Cut(rest, "\n")
		s = first + "\n" + second + "\n" + line + rest
	}
	return s, os.WriteFile(file, []byte(s), 0o644)
}

// TestPTXAssembles compiles every embedded PTX file with ptxas for its
// target and for the later architectures the executor runs it on: the
// strongest check of the kernels available without a GPU. ptxas rejects an
// instruction that needs a newer ISA than the file's .version, so a ptxas
// of CUDA 12.0 confirms that the baseline loads on 12.0 drivers. The test
// skips without ptxas: set CKPT_PTXAS to one or more ptxas binaries
// (separated by the path list separator), or put ptxas on PATH. A ptxas too
// old for a file's .version skips that file.
func TestPTXAssembles(t *testing.T) {
	var tools []string
	if env := os.Getenv("CKPT_PTXAS"); env != "" {
		tools = filepath.SplitList(env)
	} else if p, err := exec.LookPath("ptxas"); err == nil {
		tools = []string{p}
	}
	if len(tools) == 0 {
		t.Skip("no ptxas: set CKPT_PTXAS or put ptxas on PATH (PyPI: nvidia-cuda-nvcc-cu12 ships bin/ptxas)")
	}
	archs := []int{75, 80, 86, 89, 90}
	for _, tool := range tools {
		for _, m := range allModules {
			for _, a := range archs {
				if a < m.target {
					continue
				}
				out, err := exec.Command(tool, "-arch=sm_"+itoa(a), "-o", os.DevNull, m.file).CombinedOutput()
				switch {
				case err == nil:
					t.Logf("%s: %s for sm_%d: ok", tool, m.file, a)
				case strings.Contains(string(out), "Unsupported .version") || strings.Contains(string(out), "Unknown option") ||
					strings.Contains(string(out), "not defined for option 'gpu-name'"):
					t.Logf("%s: too old for %s on sm_%d: %s", tool, m.file, a, firstLine(string(out)))
				default:
					t.Errorf("%s -arch=sm_%d %s: %v\n%s", tool, a, m.file, err, out)
				}
			}
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

func TestModulesFor(t *testing.T) {
	for _, c := range []struct {
		cc, drv int
		want    []string
	}{
		{75, 12000, []string{modBase.file}},
		{80, 12000, []string{modBase.file, modMMA80.file}},
		{86, 12040, []string{modBase.file, modMMA80.file}},
		{89, 12000, []string{modBase.file, modMMA80.file}},
		{89, 12010, []string{modBase.file, modMMA89.file}},
		{90, 12000, []string{modBase.file, modMMA90.file}},
		{100, 12080, []string{modBase.file, modMMA90.file}},
		{120, 13000, []string{modBase.file, modMMA90.file}},
	} {
		ms, err := modulesFor(c.cc, c.drv)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.file)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("cc %d driver %d: %v, want %v", c.cc, c.drv, got, c.want)
		}
	}
	if _, err := modulesFor(70, 12000); err == nil || !strings.Contains(err.Error(), "7.0") {
		t.Errorf("Volta: %v", err)
	}
}
