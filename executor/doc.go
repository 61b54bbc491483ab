// Package executor puts loaded weights to work: it defines the interface an
// executor (a device) implements — upload tensors straight from the loader's
// views, dequantize scaled low-precision weights on the device, run Linear
// layers with F32 accumulation and the few elementwise ops of a small MLP,
// download results — and the exact semantics every executor follows.
//
// Package executor/cpu is the pure-Go reference that defines those semantics
// by construction; executor/cuda runs them on an NVIDIA GPU and is tested
// against it. Programs choose at run time:
//
//	ex, skipped, err := executor.NewBest(executor.WithCheckFinite())
//	// skipped says why a preferred executor (CUDA) was not available
//	w, err := ex.Upload(ctx, tensor)              // a *ckpt.Tensor, quantized or not
//	y, err := ex.Linear(ctx, x, w, bias, dtype.BF16)
//
// # Buffers and weights
//
// A Buffer is memory owned by one executor: device memory for CUDA, Go memory
// for the CPU. It has a dtype, a shape and a name: the tensor it was uploaded
// from, or for an op's output the layer it descends from (Linear's output is
// named after its weight, Add's after its second operand — the branch of a
// residual h + f(h) —, another elementwise op's after its input), so
// that a NaN report names a layer. Buffers are immutable once made; every op
// returns a new Buffer that the caller frees with Free. Passing a Buffer to
// another executor, or using it after Free, is an error (ErrArgument,
// ErrClosed), never a crash.
//
// A Weight is an uploaded tensor: its data as stored and, for a weight kept
// quantized, its scale tensors and their layout (a quant.Weight: element
// type, roles, blocks). FP8 and FP4 stay narrow on the device until an op
// dequantizes them.
//
// # Semantics
//
// Activations are F32, BF16 or F16. Every op computes in F32 (or better) and
// rounds its result once to the output dtype, to nearest with ties to even,
// with the output dtype's overflow rule: a value beyond F16's or BF16's range
// becomes ±Inf (which the check-finite option reports).
//
//   - Dequantize(w, to): bit-exact with quant.Weight.Dequantize (each element
//     the exact value of its code times its scales, rounded once to to), and
//     for a plain weight with dtype.Convert. to is F32, BF16 or F16 (the CPU
//     executor accepts every float dtype).
//   - Linear(x, w, b, out): y = x·Wᵀ + b. x is [..., K], W (logical) is [N, K],
//     b is nil or [N], y is [..., N] in dtype out. W is first dequantized to
//     F32 values exactly as Dequantize(w, F32) gives them (a plain F8 weight
//     is its codes' values); x is widened exactly to F32; each output is
//     summed in F32 — never in a half-precision type — then b (widened
//     exactly) is added in F32 and the sum rounded once to out. The order of
//     the F32 additions is the executor's: the CPU sums in increasing k, so
//     its results do not depend on its blocking or its number of workers;
//     another executor agrees within the error bound of F32 summation
//     (relative 1e-5 for F32 weights at the sizes tested, 1e-2 for BF16 and
//     FP8 weights against the F32 CPU result).
//   - Add(a, b): a + b elementwise, same shapes: the F32 sum of the widened
//     values rounded once to a's dtype. The output is named after b (after a
//     when b has no name): call it as Add(residual, branch).
//   - GELU(x): the exact form 0.5·x·(1 + erf(x/√2)), not the tanh
//     approximation.
//   - SiLU(x): x·σ(x) = x / (1 + exp(−x)).
//   - RMSNorm(x, w, eps): over the last dimension D of x,
//     y = x / sqrt(mean(x²) + eps) · w, where the sum of squares is
//     accumulated in F32, r = 1/sqrt(sum/D + eps) is computed in F32 and each
//     output is (x·r)·w in F32, rounded once to x's dtype. w is nil (no scale)
//     or [D] in any activation dtype.
//
// GELU and SiLU outputs are the function of the F32 input, computed by the
// CPU in float64 and rounded once (so exact to within one rounding of the
// output); another executor may use F32 library functions and agree within a
// few F32 ulps before the output rounding.
//
// # Checking for NaN and Inf
//
// With WithCheckFinite, after every op (Dequantize, Linear, Add, GELU, SiLU,
// RMSNorm) the executor counts NaN and Inf in the op's output on the device;
// the first op whose output holds any fails with a *NonFiniteError naming the
// op, the layer (the output Buffer's name: the weight of a Linear, the input
// of an elementwise op) and the counts. WithFiniteReport records instead:
// ops go on and a callback receives each report in order, the first report
// naming the first op. This is what tells a user chasing NaN or black frames
// which layer overflowed F16 on one device and not on another.
//
// # Choosing an executor
//
// Executors register a Backend (package executor/cpu does in its init;
// executor/cuda likewise). NewBest tries the registered backends in order of
// priority and returns the first that starts, with the reasons the others
// did not (no driver, no device, not built in); Probe lists them all, which is
// what `ckpt devices` prints.
package executor
