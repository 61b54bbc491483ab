package convert

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/internal/sysmem"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

type rssReport struct {
	Before, Peak, Written int64
}

// rssLimit is the most a conversion's resident memory may grow, whatever
// the model's size: the pieces in flight (32 MiB of output), the workers'
// staging (a few 8 MiB chunks each), the source pages of the pieces being
// read (dropped once converted), buffers and the runtime.
const rssLimit = 160 << 20

// TestRunPeakRSS converts a 512 MiB F32 checkpoint in a child process and
// reads its peak resident memory (VmHWM): it must not grow with the model.
// The source's pages leave the resident set as they are converted
// (safetensors.Tensor.Evict), the output goes to the page cache through
// write(2), and only a bounded number of pieces is in flight.
func TestRunPeakRSS(t *testing.T) {
	if path := os.Getenv("CKPT_CONVERT_RSS_CHILD"); path != "" {
		rssChild(t, path, os.Getenv("CKPT_CONVERT_RSS_DTYPE"))
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	if testing.Short() {
		t.Skip("writes 1 GiB")
	}
	testutil.SkipUnderRace(t)
	if err := testutil.ResetPeakRSS(); err != nil {
		t.Skipf("cannot reset the peak RSS (/proc/self/clear_refs): %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	var ts []ckpttest.Tensor
	zero := make([]byte, 4096*4096*4)
	for i := range rssTensors() {
		ts = append(ts, ckpttest.Tensor{Name: fmt.Sprintf("layers.%d.mlp.weight", i), DType: dtype.F32, Shape: []int64{4096, 4096}, Data: zero}) // 64 MiB each
	}
	ts = append(ts, ckpttest.Tensor{Name: "embed.weight", DType: dtype.F32, Shape: []int64{16384, 1024}, Data: zero[:16384*1024*4]})
	if err := ckpttest.WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	zero, ts = nil, nil
	// The last run dequantizes: the scaled FP8 weights the one before
	// wrote, back to BF16, read row piece by row piece.
	fp8 := filepath.Join(dir, "out-F8_E4M3.safetensors")
	for i, to := range []string{"BF16", "F8_E4M3", "BF16"} {
		src := path
		if i == 2 {
			src = fp8
		}
		var r rssReport
		out := testutil.RunChild(t, "TestRunPeakRSS", []string{"CKPT_CONVERT_RSS_CHILD=" + src, "CKPT_CONVERT_RSS_DTYPE=" + to}, &r)
		if j := strings.Index(string(out), "anon "); j >= 0 {
			t.Log(strings.SplitN(string(out[j:]), "\n", 2)[0])
		}
		growth := r.Peak - r.Before
		t.Logf("%s: %s source, %s written: peak RSS grew by %s (limit %s)", to, filepath.Base(src), sysmem.FormatSize(r.Written), sysmem.FormatSize(growth), sysmem.FormatSize(rssLimit))
		if growth > rssLimit {
			t.Errorf("%s: peak RSS grew by %s, more than %s", to, sysmem.FormatSize(growth), sysmem.FormatSize(rssLimit))
		}
	}
}

func rssChild(t *testing.T, path, to string) {
	runtime.GC()
	if err := testutil.ResetPeakRSS(); err != nil {
		t.Fatal(err)
	}
	r := rssReport{Before: testutil.ProcStatus("VmRSS")}
	tg, err := ckpt.ParseTarget(to)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), path, filepath.Join(filepath.Dir(path), "out-"+to+".safetensors"), Options{Policy: ckpt.Policy{Default: tg, Rules: []ckpt.Rule{mustRule(t, "embed.weight="+to)}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Peak = testutil.PeakRSS()
	r.Written = rep.BytesWritten
	if os.Getenv("CKPT_CONVERT_RSS_N") != "" {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("anon %d file %d heapsys %d heapinuse %d numgc %d\n", testutil.ProcStatus("RssAnon")>>20, testutil.ProcStatus("RssFile")>>20, ms.HeapSys>>20, ms.HeapInuse>>20, ms.NumGC)
	}
	testutil.PrintReport(r)
}

// rssTensors is the number of 64 MiB tensors (7, or CKPT_CONVERT_RSS_N to
// check by hand that the peak does not grow with the model).
func rssTensors() int {
	if n, err := strconv.Atoi(os.Getenv("CKPT_CONVERT_RSS_N")); err == nil && n > 0 {
		return n
	}
	return 7
}
