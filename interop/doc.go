// Package interop checks ckpt against the reference implementations, used as
// oracles: Hugging Face's Python safetensors for the file format and
// ml_dtypes for the dtype conversions (FP8, FP6, FP4, BF16, F16) and, with
// NumPy, for the dequantization of scaled low-precision layouts (package quant).
//
// The package has no API; everything is in its tests. They need the pinned
// Python environment that interop/setup.sh creates in interop/.venv (or an
// interpreter named by CKPT_INTEROP_PYTHON). Without it they skip with a
// message, unless CKPT_INTEROP=1 is set, in which case they fail, so that CI
// cannot skip them by accident:
//
//	bash interop/setup.sh
//	CKPT_INTEROP=1 go test ./interop/
//
// Data goes between Go and Python through files in t.TempDir(). See
// interop/README.md for what is compared and what the references disagree
// on.
//
// The ecosystem tier (TestEcosystem) goes further: tiny models and a
// diffusers pipeline built with pinned torch, transformers, diffusers and
// compressed-tensors are converted by the ckpt CLI and loaded back with
// from_pretrained, their state dicts compared bit for bit where the
// conversion is exact and their outputs within stated bounds where it is not.
// Its environment lives outside the clone (interop/ecosystem/setup.sh) and it
// runs only with CKPT_ECOSYSTEM=1:
//
//	bash interop/ecosystem/setup.sh
//	CKPT_ECOSYSTEM=1 go test -count=1 -run '^TestEcosystem$' ./interop/
package interop
