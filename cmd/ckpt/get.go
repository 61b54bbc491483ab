package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/internal/atomicfile"
	"github.com/ckpt-go/ckpt/internal/npy"
)

func getCommand() *command {
	c := &command{
		remote:  true,
		name:    "get",
		args:    "PATH TENSOR",
		summary: "write one tensor as the loader returns it: raw bytes or .npy",
		help: `Loads one tensor of PATH (a file, index, component folder or pipeline,
safetensors or PyTorch, as "ckpt plan" takes it) under the same variant
and dtype policy as "ckpt plan" and writes it to -o
FILE, or to standard output: converted when its target differs from the
stored dtype, dequantized when it is a scaled low-precision weight and the
target is a wider float. In a pipeline TENSOR is COMPONENT/NAME
("transformer/blocks.0.attn.weight"); a bare NAME is accepted when only one
component has it. A line on standard error says what was done.

--format raw writes the little-endian bytes (sub-byte F4/F6 stay packed as
in safetensors). --format npy writes a .npy file (the default when -o ends
in .npy): numpy's own dtypes for integers, bool, F16, F32, F64 and C64,
byte for byte what np.save writes; for the narrow floats numpy lacks, the
name ml_dtypes gives them ('bfloat16', 'float8_e4m3fn', 'float8_e5m2',
'float8_e4m3fnuz', 'float8_e5m2fnuz', 'float8_e8m0fnu', 'float4_e2m1fn',
'float6_e2m3fn', 'float6_e3m2fn'), so that

    import ml_dtypes, numpy as np
    a = np.load("w.npy")          # dtype bfloat16, the values ckpt loaded

(np.load("w.npy").view(ml_dtypes.bfloat16), the idiom for np.save's own
files, gives the same array.)

F4 and F6 are unpacked to one element a byte, as ml_dtypes holds them.
Without ml_dtypes imported np.load refuses those names ("not a valid dtype
descriptor"): use --dtype F32, or --format raw and
np.fromfile(f, np.uint16).view(ml_dtypes.bfloat16). (np.save itself writes
such arrays as anonymous '<V2'/'<V1' void data, and float8_e5m2 as '<f1',
which np.load cannot read.) A dtype added with dtype.Register has no .npy
type and is refused.

With --rank R --world N and a --split rule that matches TENSOR, get writes
rank R's part of it (its shape in the .npy header), reading only that
part's bytes; concatenating the N ranks' parts along the split dimension
gives the whole tensor.

A weight kept quantized (target "stored" or "quantized") is written as its
narrow data alone; --scale-tensors makes its scales gettable by their
stored names. A malformed scaled layout (a scale of the wrong shape or
dtype, a missing scale) fails with exit status 1 and the tensor's name.

` + policyHelp + `

Exit status: 0 on success, 1 when the tensor cannot be loaded or written,
2 for usage errors.

Examples:
  ckpt get model.safetensors lm_head.weight -o lm_head.npy
  ckpt get ./pipeline transformer/blocks.0.attn.qkv.weight --dtype F32 --format npy -o qkv.npy
  ckpt get ./deepseek-fp8 model.layers.0.mlp.down_proj.weight --dtype bf16 -o w.npy
  ckpt get ./pipeline --variant bf16 text_encoder/final_layer_norm.weight > w.bin
  ckpt get ./llama model.layers.0.self_attn.o_proj.weight --rank 1 --world 4 --split '**.o_proj.weight=1' -o part1.npy`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		var pf policyFlags
		pf.register(fs)
		format := fs.String("format", "", "output `FORMAT`, raw or npy (default: npy when -o ends in .npy, else raw)")
		outPath := fs.String("o", "", "write to `FILE` (atomically) instead of standard output")
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return usageError{msg: "get takes PATH and TENSOR"}
		}
		f := *format
		if f == "" {
			f = "raw"
			if strings.HasSuffix(strings.ToLower(*outPath), ".npy") {
				f = "npy"
			}
		}
		if f != "raw" && f != "npy" {
			return usageError{msg: fmt.Sprintf("--format %q: want raw or npy", f)}
		}
		toStdout := *outPath == "" || *outPath == "-"
		if toStdout && isTerminal(e.stdout) {
			return usageError{msg: "refusing to write binary data to a terminal: use -o FILE or redirect standard output"}
		}
		opts, err := pf.options()
		if err != nil {
			return err
		}
		m, err := openModel(pos[0], opts)
		if err != nil {
			return err
		}
		defer m.Close()
		t, err := m.LoadTensor(context.Background(), pos[1])
		if err != nil {
			if errors.Is(err, ckpt.ErrNotFound) {
				if near := similarNames(m.Names(), pos[1], 5); len(near) > 0 {
					return fmt.Errorf("%w\n  similar names: %s", err, strings.Join(near, ", "))
				}
			}
			return err
		}
		if f == "npy" {
			if _, err := npy.Descr(t.DType); err != nil {
				return fmt.Errorf("%w: use --format raw, or --dtype F32 to convert", err)
			}
		}
		write := func(w io.Writer) error {
			if f == "npy" {
				return npy.Write(w, t.DType, t.Shape, t.Bytes())
			}
			_, err := w.Write(t.Bytes())
			return err
		}
		dest := "standard output"
		if toStdout {
			if err := write(e.stdout); err != nil {
				return err
			}
		} else {
			af, err := atomicfile.Create(context.Background(), *outPath)
			if err != nil {
				return err
			}
			if err := write(af); err != nil {
				af.Abort()
				return err
			}
			if err := af.Commit(); err != nil {
				return err
			}
			dest = *outPath
		}
		fmt.Fprintf(e.stderr, "%s\n", describeLoaded(m, t, f, dest))
		return nil
	}
	return c
}

// describeLoaded says in one line what get did.
func describeLoaded(m *ckpt.Model, t *ckpt.Tensor, format, dest string) string {
	name := t.Name
	if len(m.Components()) > 1 {
		name = t.Component + "/" + t.Name
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s %s", name, t.Stored, formatShape(t.Shape))
	if t.Split != nil {
		fmt.Fprintf(&b, " (part %s, %s)", formatPart(t.Split), t.Split.Rule)
	}
	if t.Layout != "" {
		fmt.Fprintf(&b, " (%s)", t.Layout)
	}
	fmt.Fprintf(&b, " -> %s by %s (%s)", t.DType, t.Action(), t.Decision.Rule)
	switch t.Action() {
	case ckpt.ActionConvert, ckpt.ActionDequantize:
		fmt.Fprintf(&b, "; %s", t.Stats)
	case ckpt.ActionQuantized:
		scales := make([]string, len(t.Scales))
		for i, s := range t.Scales {
			scales[i] = s.Name
		}
		fmt.Fprintf(&b, "; the narrow data only, without its scales %s", strings.Join(scales, ", "))
	}
	fmt.Fprintf(&b, "; %d bytes as %s to %s", len(t.Bytes()), format, dest)
	return b.String()
}

// similarNames returns up to n names containing query's last part
// (case-insensitively), for a "not found" message.
func similarNames(names []string, query string, n int) []string {
	q := strings.ToLower(query)
	if i := strings.LastIndexByte(q, '/'); i >= 0 {
		q = q[i+1:]
	}
	var out []string
	for _, name := range names {
		if strings.Contains(strings.ToLower(name), q) {
			out = append(out, name)
			if len(out) == n {
				break
			}
		}
	}
	return out
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
