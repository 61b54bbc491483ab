package executor_test

import (
	"fmt"

	"github.com/ckpt-go/ckpt/executor"
	_ "github.com/ckpt-go/ckpt/executor/cpu" // registers the "cpu" backend
)

// NewBest starts the best executor this program can run, and says why the
// others were skipped.
func ExampleNewBest() {
	ex, skipped, err := executor.NewBest()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.Close()
	for _, s := range skipped {
		_ = s.Err // e.g. "cuda: not built into this program", "no driver"
	}
	fmt.Println(ex.Info().Kind == "cpu" || ex.Info().Kind == "cuda")
	// Output: true
}
