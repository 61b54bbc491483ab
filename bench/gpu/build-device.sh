#!/bin/sh
# build-device.sh [DIR]: builds, on this machine, what device.sh runs on a
# GPU machine: the executor/cuda test binary and the bench/gpu program, both
# with CGO_ENABLED=0 (no dependence on this machine's C library), into DIR
# (default .gpubin in the repository root, which git ignores). The GPU
# machine must have the same processor architecture (x86-64).
set -eu
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/.gpubin}"
mkdir -p "$out"
cd "$root"
CGO_ENABLED=0 go test -c -o "$out/cuda.test" ./executor/cuda/
cd bench
CGO_ENABLED=0 go build -o "$out/ckpt-gpu" ./gpu
echo "build-device.sh: $out/cuda.test $out/ckpt-gpu"
