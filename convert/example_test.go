package convert_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/convert"
	"github.com/ckpt-go/ckpt/dtype"
	"github.com/ckpt-go/ckpt/safetensors"
)

// A training loop proves its save path at step 0 with Check, then saves
// every 100 steps in the background, keeping the last two checkpoints.
// The snapshot handed to Save is not modified until the save is done:
// here the loop waits for it before refilling the snapshot; two
// alternating snapshots would let it go on at once.
func ExampleSave() {
	dir, _ := os.MkdirTemp("", "run")
	defer os.RemoveAll(dir)

	weights := make([]float32, 1024)
	snapshot := []safetensors.TensorData{
		{Name: "layer.weight", DType: dtype.F8_E4M3, Shape: []int64{32, 32}, Data: make([]byte, 1024)},
		{Name: "optimizer.layer.weight.exp_avg", DType: dtype.F32, Shape: []int64{32, 32}, Data: make([]byte, 4096)},
	}
	specs := make([]safetensors.TensorSpec, len(snapshot))
	for i, t := range snapshot {
		specs[i] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	opts := convert.SaveOptions{KeepLast: 2, Background: true}
	if err := convert.Check(dir, specs, opts); err != nil {
		fmt.Println("the save at the end would fail:", err)
		return
	}

	var pending *convert.Pending
	for step := int64(1); step <= 300; step++ {
		for i := range weights {
			weights[i] += 0.01 // the training step
		}
		if step%100 != 0 {
			continue
		}
		if pending != nil {
			if _, err := pending.Wait(); err != nil { // the snapshot is ours again
				fmt.Println(err)
				return
			}
		}
		dtype.Convert(snapshot[0].Data, dtype.F8_E4M3, dtype.Float32Bytes(weights), dtype.F32, dtype.Options{Saturate: true})
		opts.Step, opts.Epoch = step, float64(step)/100
		var err error
		if pending, err = convert.Save(context.Background(), dir, snapshot, opts); err != nil {
			fmt.Println(err)
			return
		}
	}
	res, err := pending.Wait()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("saved", res.Name, "removed", res.Removed)

	cps, _ := convert.Checkpoints(dir)
	for _, c := range cps {
		fmt.Println("kept", c.Name, "step", c.Step, "epoch", c.Epoch)
	}
	m, err := ckpt.Open(filepath.Join(dir, "checkpoint-300"), ckpt.WithDType(ckpt.AsStored))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	w, _ := m.LoadTensor(context.Background(), "layer.weight")
	f, _ := w.Float32s()
	fmt.Println(w.DType, w.Shape, f[0])
	// Output:
	// saved checkpoint-300 removed [checkpoint-100]
	// kept checkpoint-200 step 200 epoch 2
	// kept checkpoint-300 step 300 epoch 3
	// F8_E4M3 [32 32] 3
}

// Check reports every problem of a save at once, each naming its tensor.
func ExampleCheck() {
	dir, _ := os.MkdirTemp("", "run")
	defer os.RemoveAll(dir)
	specs := []safetensors.TensorSpec{
		{Name: "experts.w", DType: dtype.F4, Shape: []int64{3, 5}},
		{Name: "experts.w", DType: dtype.F8_E8M0, Shape: []int64{3, 1}},
	}
	err := convert.Check(dir, specs, convert.SaveOptions{Metadata: map[string]string{"step": "7"}})
	fmt.Println(errors.Is(err, convert.ErrInvalid))
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *convert.Error
		if errors.As(e, &ce) {
			fmt.Printf("%s %q: %s\n", ce.Kind.String(), ce.Tensor+ce.Field, ce.Msg)
		}
	}
	// Output:
	// true
	// invalid "metadata step": set by Save from SaveOptions.Step
	// invalid "experts.w": shape: F4[3 5]
	// invalid "experts.w": duplicate: two tensors have this name
}
