package cuda

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

//go:generate sh kernels/gen.sh

// The PTX modules, generated from kernels/*.cu by kernels/gen.sh and
// committed, so that building needs no CUDA toolkit.
var (
	//go:embed kernels/base_sm75.ptx
	ptxBase string
	//go:embed kernels/mma_sm80.ptx
	ptxMMA80 string
	//go:embed kernels/mma_sm89.ptx
	ptxMMA89 string
	//go:embed kernels/mma_sm90.ptx
	ptxMMA90 string
)

// ptxModule is one embedded PTX file and the policy its header follows.
type ptxModule struct {
	file string
	src  string
	// target is the .target the file must declare: the oldest compute
	// capability (major·10+minor) it runs on.
	target int
	// version is the PTX ISA .version it must declare, the lowest that its
	// instructions allow: 8.0 (CUDA 12.0 drivers) for every file but the
	// sm_89 FP8 one, whose conversion instructions need 8.1 on sm_89.
	version string
	// kernels are the entry points the executor uses from it.
	kernels []string
}

// Kernel names.
const (
	kDequant   = "ck_dequant"
	kConvert   = "ck_convert"
	kAdd       = "ck_add"
	kGELU      = "ck_gelu"
	kSiLU      = "ck_silu"
	kRMSNorm   = "ck_rmsnorm"
	kNonFinite = "ck_count_nonfinite"
	kLinear    = "ck_linear"
	kMMABF16   = "ck_linear_mma_bf16"
	kMMAF16    = "ck_linear_mma_f16"
)

var (
	modBase  = ptxModule{"kernels/base_sm75.ptx", ptxBase, 75, "8.0", []string{kDequant, kConvert, kAdd, kGELU, kSiLU, kRMSNorm, kNonFinite, kLinear}}
	modMMA80 = ptxModule{"kernels/mma_sm80.ptx", ptxMMA80, 80, "8.0", []string{kMMABF16, kMMAF16}}
	modMMA89 = ptxModule{"kernels/mma_sm89.ptx", ptxMMA89, 89, "8.1", []string{kMMABF16, kMMAF16}}
	modMMA90 = ptxModule{"kernels/mma_sm90.ptx", ptxMMA90, 90, "8.0", []string{kMMABF16, kMMAF16}}
)

// allModules lists every embedded module (for the header tests).
var allModules = []ptxModule{modBase, modMMA80, modMMA89, modMMA90}

// minCC is the oldest compute capability the executor supports (Turing).
const minCC = 75

// modulesFor returns the modules to load on a device of compute
// capability cc (major·10+minor) under a driver of the given CUDA version
// (cuDriverGetVersion: 12010 for 12.1): the baseline, and the tensor-core
// Linear built for the newest target the device runs whose PTX ISA version
// the driver can compile (sm_89's FP8 variant needs a 12.1 driver; a 12.0
// driver on an sm_89 device gets the sm_80 variant).
func modulesFor(cc, driverVersion int) ([]ptxModule, error) {
	if cc < minCC {
		return nil, fmt.Errorf("compute capability %d.%d is older than Turing (7.5), the oldest this executor supports", cc/10, cc%10)
	}
	out := []ptxModule{modBase}
	for _, m := range []ptxModule{modMMA90, modMMA89, modMMA80} {
		if cc >= m.target && driverISA(driverVersion) >= isaNumber(m.version) {
			// sm_90 code runs on sm_90 and later; sm_89 code on sm_89 and
			// later non-90 parts too, but a device at 9.0+ takes sm_90's.
			out = append(out, m)
			break
		}
	}
	return out, nil
}

// isaNumber turns a PTX ISA version "8.1" into 81.
func isaNumber(v string) int {
	maj, min, _ := strings.Cut(v, ".")
	a, _ := strconv.Atoi(maj)
	b, _ := strconv.Atoi(min)
	return a*10 + b
}

// driverISA returns the newest PTX ISA version (as isaNumber) a driver of
// the given CUDA version JIT-compiles: 8.0 for 12.0, 8.1 for 12.1, ...
// (each 12.x release added one ISA minor version up to 12.5's 8.5; newer
// drivers compile more, and 8.1 is the newest this package needs).
func driverISA(v int) int {
	major, minor := v/1000, v%1000/10
	switch {
	case major > 12:
		return 90
	case major < 12:
		return 0
	}
	return 80 + min(minor, 5)
}

// ptxHeader reads the .version and .target directives of a PTX text.
func ptxHeader(src string) (version, target string, err error) {
	for _, line := range strings.Split(src, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "//") {
			continue
		}
		switch f[0] {
		case ".version":
			if version == "" {
				version = f[1]
			}
		case ".target":
			if target == "" {
				target = strings.TrimSuffix(f[1], ",")
			}
		}
		if version != "" && target != "" {
			return version, target, nil
		}
	}
	return version, target, fmt.Errorf("PTX without a .version and a .target directive")
}
