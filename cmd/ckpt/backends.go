package main

// The executors built into the ckpt command. Each import registers a
// backend with package executor; `ckpt devices` lists them (and the known
// ones missing from this build) and `ckpt run-mlp` picks the best.
import (
	_ "github.com/ckpt-go/ckpt/executor/cpu"
	_ "github.com/ckpt-go/ckpt/executor/cuda"
)
