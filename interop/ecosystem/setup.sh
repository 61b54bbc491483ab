#!/usr/bin/env bash
# Creates (or refreshes) the pinned Python environment of the ecosystem tier
# (torch, transformers, diffusers, compressed-tensors, ...): about 5.3 GB,
# so it lives outside the clone, where CI runs on the same machine reuse it:
#
#   ${CKPT_ECOSYSTEM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt/ecosystem-venv}
#
# Idempotent: when the environment was built from the same requirements.txt
# and Python, a run only prints the versions (about a second). Otherwise pip
# installs the pins over it and removes what the pins no longer name.
#
# Exit status 3: not enough disk space to install it (nothing was changed).
#
# Then:  CKPT_ECOSYSTEM=1 go test -count=1 -run '^TestEcosystem$' ./interop/
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
req="$here/requirements.txt"
venv="${CKPT_ECOSYSTEM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt/ecosystem-venv}"
py="${PYTHON:-python3}"

mkdir -p "$(dirname "$venv")"
# One setup at a time per environment (two CI runs on one machine).
exec 9>"$venv.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi

# A venv whose base interpreter is gone (or another Python) is rebuilt.
want_py="$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
have_py="$("$venv/bin/python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || true)"
if [[ "$have_py" != "$want_py" ]]; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
fi

stamp="$venv/.ckpt-requirements"
want="python $want_py
$(cat "$req")"
if [[ ! -f "$stamp" ]] || [[ "$(cat "$stamp")" != "$want" ]]; then
  # The install needs ~5.3 GB where the environment lives (and room to
  # unpack): on a machine without it, say so and exit 3, which .ci/run
  # reports as the tier not run rather than as a failure of ckpt.
  need_kb=$((8 * 1024 * 1024))
  free_kb="$(df -Pk "$(dirname "$venv")" | awk 'NR == 2 { print $4 }')"
  if [[ -n "$free_kb" ]] && ((free_kb < need_kb)); then
    echo "ecosystem env: $((free_kb / 1024)) MiB free under $(dirname "$venv"); the environment needs about 8 GiB to install" >&2
    exit 3
  fi
  echo "ecosystem env: installing the pins into $venv (first time: a few minutes, ~5 GB)"
  rm -f "$stamp"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir -r "$req"
  # Remove what an earlier requirements.txt installed and this one does not name.
  extra="$("$venv/bin/python" - "$req" <<'PY'
import importlib.metadata as md, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
pinned = {norm(l.split("==")[0]) for l in open(sys.argv[1]) if "==" in l and not l.startswith("#")}
keep = pinned | {"pip", "setuptools", "wheel"}
print(" ".join(sorted({d.metadata["Name"] for d in md.distributions() if norm(d.metadata["Name"]) not in keep})))
PY
)"
  if [[ -n "$extra" ]]; then
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip uninstall --quiet --disable-pip-version-check -y $extra
  fi
  printf '%s' "$want" >"$stamp"
fi

"$venv/bin/python" - <<'PY'
import importlib.metadata as md
names = ["torch", "transformers", "diffusers", "compressed-tensors", "accelerate", "safetensors", "numpy"]
print("ecosystem env: " + ", ".join("%s %s" % (n, md.version(n)) for n in names))
PY
