#!/usr/bin/env bash
# Benchmark of `ckpt convert` against cp, in the same run.
#
# Generates an F32 checkpoint of SIZE (default 2GiB; transformer-like:
# 4096x4096 linear weights with normally distributed values and norm
# vectors), then, ROUNDS times (default 5) and taking turns:
#   cp         cp SRC DST
#   cp+sync    cp SRC DST && sync DST  (the output made durable, as convert's
#              commit makes it: fsync, rename, folder fsync)
#   bf16       ckpt convert SRC DST --dtype bf16
#   fp8        ckpt convert SRC DST --dtype F8_E4M3   (per-channel scales)
#   fp8-block  ckpt convert SRC DST --dtype F8_E4M3 --fp8-scale block:128
# each under /usr/bin/time -v (wall time, maximum resident set size), the
# output removed after each run. The source stays in the page cache (it is
# read once before the rounds), so the times are the cost of the copy or
# conversion and of writing the output, not of reading a cold disk.
# Prints a Markdown table of medians and ratios to cp.
#
# Usage (from the repository root or anywhere; needs Go, /usr/bin/time, about
# 2×SIZE of free disk in the work folder):
#   bash bench/convert.sh [SIZE] [ROUNDS]
#   WORK=/mnt/scratch bash bench/convert.sh 4GiB 3
# Everything generated goes to a temporary folder under $WORK (default
# $TMPDIR or /tmp), removed at the end, also on failure or Ctrl-C.
set -euo pipefail

SIZE=${1:-2GiB}
ROUNDS=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "convert.sh: needs GNU time at /usr/bin/time" >&2; exit 1; }

WORKDIR=$(mktemp -d "${WORK:-${TMPDIR:-/tmp}}/ckpt-convert-bench.XXXXXX")
cleanup() { rm -rf "$WORKDIR"; }
trap cleanup EXIT INT TERM

echo "building ckpt and genckpt..." >&2
(cd "$ROOT" && go build -o "$WORKDIR/ckpt" ./cmd/ckpt)
(cd "$ROOT/bench" && go build -o "$WORKDIR/genckpt" ./cmd/genckpt)

SRC="$WORKDIR/src/model.safetensors"
mkdir -p "$WORKDIR/src" "$WORKDIR/out"
"$WORKDIR/genckpt" -size "$SIZE" -hidden 4096 "$SRC" >&2
BYTES=$(stat -c %s "$SRC")
cat "$SRC" > /dev/null # into the page cache

declare -A CMD=(
  [cp]="cp $SRC $WORKDIR/out/model.safetensors"
  [cp+sync]="sh -c 'cp $SRC $WORKDIR/out/model.safetensors && sync $WORKDIR/out/model.safetensors'"
  [bf16]="$WORKDIR/ckpt convert $SRC $WORKDIR/out/model.safetensors --dtype bf16"
  [fp8]="$WORKDIR/ckpt convert $SRC $WORKDIR/out/model.safetensors --dtype F8_E4M3"
  [fp8-block]="$WORKDIR/ckpt convert $SRC $WORKDIR/out/model.safetensors --dtype F8_E4M3 --fp8-scale block:128"
)
ORDER=(cp cp+sync bf16 fp8 fp8-block)

# run NAME: one timed run; appends "wall_seconds max_rss_kb" to $WORKDIR/NAME.
run() {
  local name=$1 log="$WORKDIR/time.log"
  sync # flush the previous run's dirty pages outside the timed region
  eval "$TIME -v ${CMD[$name]}" > /dev/null 2> "$log" || { cat "$log" >&2; exit 1; }
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,p,":"); s=0; for(i=1;i<=n;i++) s=s*60+p[i]; print s}' "$log")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")
  echo "$wall $rss" >> "$WORKDIR/$name"
  rm -rf "$WORKDIR/out" && mkdir -p "$WORKDIR/out"
}

# Each round starts one further along the order, so that no run always
# follows the same one.
for r in $(seq "$ROUNDS"); do
  for i in "${!ORDER[@]}"; do
    run "${ORDER[$(( (i + r - 1) % ${#ORDER[@]} ))]}"
  done
  echo "round $r/$ROUNDS done" >&2
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

cpmed=$(awk '{print $1}' "$WORKDIR/cp" | median)
cpsync=$(awk '{print $1}' "$WORKDIR/cp+sync" | median)
echo
echo "Source: $(awk -v b="$BYTES" 'BEGIN {printf "%.2f GiB", b/1073741824}') F32 ($SIZE requested), $ROUNDS rounds, $(nproc) CPUs, medians."
echo
echo "| run | wall time (s) | × cp | × cp+sync | source GB/s | max RSS (MiB) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for name in "${ORDER[@]}"; do
  wall=$(awk '{print $1}' "$WORKDIR/$name" | median)
  rss=$(awk '{print $2}' "$WORKDIR/$name" | median)
  awk -v n="$name" -v w="$wall" -v c="$cpmed" -v s="$cpsync" -v r="$rss" -v b="$BYTES" \
    'BEGIN {printf "| %s | %.2f | %.2f | %.2f | %.2f | %.0f |\n", n, w, w/c, w/s, b/w/1e9, r/1024}'
done
