#!/bin/bash
# device.sh [DIR]: the whole GPU check of the CUDA executor in one command on
# a GPU machine (at most 9.5 minutes: the step limits add up to 570 s, under
# the device tool's 10 minutes a command), from the repository root, with
# DIR (default .gpubin) holding what build-device.sh built. With the
# workplace's device tool:
#   sh bench/gpu/build-device.sh          # here
#   run: bash bench/gpu/device.sh         # there, carry [".gpubin"]
# Steps, each with its own time limit, logs under $OUT (else /tmp/ckpt-gpu-out):
#   1. the GPU's name and driver;
#   2. every GPU test with CKPT_REQUIRE_GPU=1 (fails, never skips, without a
#      GPU): bit-exact dequantization and conversion, Linear (tiled and
#      tensor-core) against the CPU reference, uploads;
#   3. compute-sanitizer memcheck over the tests that launch most kernels,
#      and racecheck over Linear, when compute-sanitizer is there;
#   4. bench/gpu with the PyTorch/safetensors peers (peers.py), warm and
#      cold (as root), as a Markdown table for BENCHMARKS.md.
# It goes on after a failed step and exits non-zero if any failed.
# $CKPT_BENCH_ARGS are added to bench/gpu's arguments (a dry run elsewhere:
# "-size 8MiB -dim 128 -runs 1 -cold=false -peers=").
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(cd "${1:-$root/.gpubin}" && pwd)"
out="${OUT:-/tmp/ckpt-gpu-out}"
mkdir -p "$out"
failed=0
step() { # step NAME SECONDS COMMAND...: run it with a time limit, log to $out/NAME.log
	local name=$1 secs=$2
	shift 2
	echo "== $name"
	if ! timeout "$secs" "$@" >"$out/$name.log" 2>&1; then
		echo "   FAILED (exit $?; the end of $name.log follows)"
		tail -n 30 "$out/$name.log"
		failed=1
	fi
	grep -E '^(--- FAIL|FAIL|ok|PASS)|ERROR SUMMARY|RACECHECK SUMMARY' "$out/$name.log" | tail -n 12
}

if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv | tee "$out/gpu.txt"
fi
cd "$root/executor/cuda" # the tests read testdata/ from here
step gpu-tests 120 env CKPT_REQUIRE_GPU=1 "$bin/cuda.test" -test.v -test.count=1 -test.run '^TestGPU'
if command -v compute-sanitizer >/dev/null 2>&1; then
	step memcheck 90 env CKPT_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 3 \
		"$bin/cuda.test" -test.count=1 -test.run '^TestGPU(DequantizeBitExact|LinearLayouts|UploadRing|Elementwise)$'
	step racecheck 60 env CKPT_REQUIRE_GPU=1 compute-sanitizer --tool racecheck --error-exitcode 3 \
		"$bin/cuda.test" -test.count=1 -test.run '^TestGPULinear$'
else
	echo "== compute-sanitizer not found: memcheck and racecheck not run"
fi
cd "$root"
# shellcheck disable=SC2086
step bench 300 "$bin/ckpt-gpu" -dir /tmp/ckpt-gpu-bench -peers "$root/bench/gpu/peers.py" ${CKPT_BENCH_ARGS:-}
cat "$out/bench.log"
exit $failed
