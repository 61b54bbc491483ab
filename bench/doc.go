// Package bench compares ckpt's safetensors reader with its Go peers on the
// same files: header parsing (MB/s of JSON), opening, and zero-copy tensor
// access. It is a separate module so that the peers' dependencies never
// reach ckpt's own go.mod; the code is in tests and benchmarks, and in
// cmd/peers, the driver that measures ckpt against Python safetensors +
// NumPy and the Rust safetensors crate (peers/python, peers/rust). See
// README.md for how to run them and BENCHMARKS.md (peers sections) for the
// numbers.
package bench
