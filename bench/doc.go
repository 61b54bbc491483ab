// Package bench compares ckpt's safetensors reader with its Go peers on the
// same files: header parsing (MB/s of JSON), opening, and zero-copy tensor
// access. It is a separate module so that the peers' dependencies never
// reach ckpt's own go.mod; the code is all in tests and benchmarks. See
// README.md for how to run them and BENCHMARKS.md (peers section) for the
// numbers.
package bench
