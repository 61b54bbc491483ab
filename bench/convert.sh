#!/usr/bin/env bash
# Benchmark of `ckpt convert` against cp and against the Python script users
# write, in the same run.
#
# Generates an F32 checkpoint of SIZE (default 2GiB; transformer-like:
# 4096x4096 linear weights with normally distributed values and norm
# vectors; see CKPT_BENCH_HIDDEN), then, ROUNDS times (default 5) and taking turns:
#   cp           cp SRC DST
#   cp+sync      cp SRC DST && sync DST  (the output made durable, as convert's
#                commit makes it: fsync, rename, folder fsync)
#   bf16         ckpt convert SRC DST --dtype bf16
#   fp8          ckpt convert SRC DST --dtype F8_E4M3   (per-channel scales)
#   fp8-block    ckpt convert SRC DST --dtype F8_E4M3 --fp8-scale block:128
#   torch        python bench/peers/python/convert_torch.py SRC DST:
#                safetensors.torch.load_file, .to(torch.bfloat16) per tensor,
#                save_file (the output left in the page cache)
#   torch+fsync  the same, then os.fsync of DST and of its folder (as durable
#                as convert's output)
# each under /usr/bin/time -v (wall time, maximum resident set size), the
# output removed and everything flushed (sync) after each run. The source stays
# in the page cache (it is read once before the rounds), so the times are the
# cost of the copy or conversion and of writing the output, not of reading a
# cold disk. All outputs go to the same folder (the same filesystem).
# The Python runs also report their own time after the imports (load, cast,
# save and the syncs): the "work" column; for the others it is the wall time.
# Prints Markdown tables of medians and ratios, and the load average.
#
# The torch peers run only when CKPT_BENCH_TORCH_PYTHON names a Python with
# torch and safetensors (this script installs nothing). The pinned virtual
# environment of the interop suite's ecosystem tier is one:
#   bash interop/ecosystem/setup.sh
#   CKPT_BENCH_TORCH_PYTHON=${XDG_CACHE_HOME:-$HOME/.cache}/ckpt/ecosystem-venv/bin/python \
#     bash bench/convert.sh
# CKPT_BENCH_RUNS picks runs (default all; e.g. "cp+sync bf16 torch torch+fsync").
# CKPT_BENCH_HIDDEN sets the hidden size (default 4096: 4096x4096 weights, at
# least 0.44 GiB; 1536 makes a model of about 250 MB from SIZE=240MB).
# CKPT_BENCH_BASE names another ckpt binary (say, built at an earlier commit)
# whose BF16 conversion runs as bf16-base in the same rounds: before and after.
#
# Usage (from the repository root or anywhere; needs Go, /usr/bin/time, about
# 2×SIZE of free disk in the work folder, and with torch about 2×SIZE of free
# memory):
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
DST="$WORKDIR/out/model.safetensors"
PY=${CKPT_BENCH_TORCH_PYTHON:-}
PYSCRIPT="$ROOT/bench/peers/python/convert_torch.py"
mkdir -p "$WORKDIR/src" "$WORKDIR/out"
"$WORKDIR/genckpt" -size "$SIZE" -hidden "${CKPT_BENCH_HIDDEN:-4096}" "$SRC" >&2
BYTES=$(stat -c %s "$SRC")
cat "$SRC" > /dev/null # into the page cache

declare -A CMD=(
  [cp]="cp $SRC $DST"
  [cp+sync]="sh -c 'cp $SRC $DST && sync $DST'"
  [bf16]="$WORKDIR/ckpt convert $SRC $DST --dtype bf16"
  [fp8]="$WORKDIR/ckpt convert $SRC $DST --dtype F8_E4M3"
  [fp8-block]="$WORKDIR/ckpt convert $SRC $DST --dtype F8_E4M3 --fp8-scale block:128"
  [bf16-base]="${CKPT_BENCH_BASE:-} convert $SRC $DST --dtype bf16"
  [torch]="$PY $PYSCRIPT $SRC $DST"
  [torch+fsync]="$PY $PYSCRIPT $SRC $DST --fsync"
)
ORDER=(${CKPT_BENCH_RUNS:-cp cp+sync bf16 fp8 fp8-block torch torch+fsync ${CKPT_BENCH_BASE:+bf16-base}})
for name in "${ORDER[@]}"; do
  [ -n "${CMD[$name]+x}" ] || { echo "convert.sh: unknown run $name in CKPT_BENCH_RUNS" >&2; exit 1; }
done
if [ -z "${CKPT_BENCH_BASE:-}" ] && printf '%s\n' "${ORDER[@]}" | grep -qx bf16-base; then
  echo "convert.sh: bf16-base needs CKPT_BENCH_BASE" >&2
  exit 1
fi
# The torch peers need the interpreter; without it they are left out.
if [ -z "$PY" ] || ! "$PY" -c 'import torch, safetensors.torch' 2> /dev/null; then
  echo "convert.sh: no torch peer (set CKPT_BENCH_TORCH_PYTHON to a Python with torch and safetensors," \
    "e.g. \${XDG_CACHE_HOME:-\$HOME/.cache}/ckpt/ecosystem-venv/bin/python from interop/ecosystem/setup.sh)" >&2
  ORDER=($(printf '%s\n' "${ORDER[@]}" | grep -v '^torch'))
elif printf '%s\n' "${ORDER[@]}" | grep -q '^torch'; then
  # Untimed: both write the same bytes for every tensor (this also compiles
  # the script's imports once).
  "$WORKDIR/ckpt" convert "$SRC" "$DST" --dtype bf16 > /dev/null
  "$PY" "$PYSCRIPT" "$SRC" "$WORKDIR/torch.safetensors" > /dev/null
  "$PY" - "$DST" "$WORKDIR/torch.safetensors" <<'PYEOF' >&2
import sys
import torch
from safetensors import safe_open
with safe_open(sys.argv[1], "pt") as a, safe_open(sys.argv[2], "pt") as b:
    names = sorted(a.keys())
    assert names == sorted(b.keys()), "different tensor names"
    for n in names:
        x, y = a.get_tensor(n), b.get_tensor(n)
        assert x.dtype == y.dtype == torch.bfloat16 and x.shape == y.shape, n
        assert x.view(torch.int16).equal(y.view(torch.int16)), n
print(f"check: ckpt's BF16 output equals torch's, {len(names)} tensors bit for bit")
PYEOF
  rm -rf "$WORKDIR/out" "$WORKDIR/torch.safetensors" && mkdir -p "$WORKDIR/out"
fi

# run NAME ROUND: one timed run; appends "round wall_seconds max_rss_kb
# work_seconds cpu_seconds work_cpu_seconds" to $WORKDIR/NAME (CPU: user +
# system, all threads; the work columns are the Python peer's own figures
# after its imports, the whole run for the others).
run() {
  local name=$1 round=$2 log="$WORKDIR/time.log" out="$WORKDIR/run.out"
  sync # flush the previous run's dirty pages outside the timed region
  eval "$TIME -v ${CMD[$name]}" > "$out" 2> "$log" || { cat "$log" >&2; exit 1; }
  local wall rss cpu work wcpu
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,p,":"); s=0; for(i=1;i<=n;i++) s=s*60+p[i]; print s}' "$log")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")
  cpu=$(awk -F': ' '/User time \(seconds\)|System time \(seconds\)/ {s+=$2} END {print s}' "$log")
  work=$(sed -n 's/^RESULT work_seconds=\([0-9.]*\).*/\1/p' "$out")
  wcpu=$(sed -n 's/^RESULT .*work_cpu_seconds=\([0-9.]*\).*/\1/p' "$out")
  echo "$round $wall $rss ${work:-$wall} $cpu ${wcpu:-$cpu}" >> "$WORKDIR/$name"
  echo "  $name: wall ${wall}s, work ${work:-$wall}s, CPU ${cpu}s" >&2
  rm -rf "$WORKDIR/out" && mkdir -p "$WORKDIR/out"
}

loadavg() { cut -d' ' -f1 /proc/loadavg; }

# Each round starts one further along the order, so that no run always
# follows the same one.
LOADS=$(loadavg)
for r in $(seq "$ROUNDS"); do
  for i in "${!ORDER[@]}"; do
    run "${ORDER[$(( (i + r - 1) % ${#ORDER[@]} ))]}" "$r"
  done
  LOADS="$LOADS $(loadavg)"
  echo "round $r/$ROUNDS done (load average $(loadavg))" >&2
done
sync

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
col() { awk -v c="$2" '{print $c}' "$WORKDIR/$1" | median; }

has() { [ -f "$WORKDIR/$1" ]; }
echo
echo "Source: $(awk -v b="$BYTES" 'BEGIN {printf "%.2f GiB", b/1073741824}') F32 ($SIZE requested, hidden ${CKPT_BENCH_HIDDEN:-4096}), $ROUNDS rounds, $(nproc) CPUs, medians;" \
  "1-minute load average $(printf '%s\n' $LOADS | sort -g | head -1)–$(printf '%s\n' $LOADS | sort -g | tail -1) (before and after each round)."
echo
echo "| run | wall time (s) | work (s) | × cp | × cp+sync | source GB/s | CPU (s) | work CPU (s) | max RSS (MiB) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
cpmed=$(has cp && col cp 2 || echo 0)
cpsync=$(has cp+sync && col cp+sync 2 || echo 0)
for name in "${ORDER[@]}"; do
  awk -v n="$name" -v w="$(col "$name" 2)" -v k="$(col "$name" 4)" -v c="$cpmed" -v s="$cpsync" \
    -v r="$(col "$name" 3)" -v b="$BYTES" -v u="$(col "$name" 5)" -v wu="$(col "$name" 6)" \
    'function x(v) {return v > 0 ? sprintf("%.2f", w/v) : "—"}
     BEGIN {printf "| %s | %.2f | %.2f | %s | %s | %.2f | %.2f | %.2f | %.0f |\n", n, w, k, x(c), x(s), b/k/1e9, u, wu, r/1024}'
done

# ckpt's BF16 conversion against the Python work (after imports), run by run:
# the ratio of the medians and the median of the ratios within each round.
if has bf16 && { has torch || has torch+fsync; }; then
  echo
  echo "| ckpt convert --dtype bf16 against | Python work (s) | Python wall (s) | ckpt (s) | ckpt ÷ work, medians | ckpt ÷ work, median per round | rounds ckpt ≤ work |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  for name in torch torch+fsync; do
    has "$name" || continue
    join <(sort -k1,1 "$WORKDIR/bf16") <(sort -k1,1 "$WORKDIR/$name") |
      awk '{print $2 / $9, ($2 <= $9)}' > "$WORKDIR/ratio"
    awk -v n="$name" -v k="$(col "$name" 4)" -v w="$(col "$name" 2)" -v c="$(col bf16 2)" \
      -v m="$(awk '{print $1}' "$WORKDIR/ratio" | median)" \
      -v wins="$(awk '{s+=$2} END {print s "/" NR}' "$WORKDIR/ratio")" \
      'BEGIN {printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", n, k, w, c, c/k, m, wins}'
  done
fi
