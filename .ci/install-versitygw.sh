#!/usr/bin/env bash
# Installs the S3-compatible test server that the remote tests start
# (versitygw, Apache-2.0, with its posix backend) into .cache/bin of the
# repository. It is skipped when that binary is already the pinned version
# (go version -m). The tests find it there, or on PATH; CKPT_S3_ENDPOINT
# points them at another server instead.
set -euo pipefail
cd "$(dirname "$0")/.."
want=v1.8.0
bin="$PWD/.cache/bin/versitygw"
if [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+github.com/versity/versitygw[[:space:]]+$want([[:space:]]|$)"; then
  echo "versitygw $want already in .cache/bin"
  exit 0
fi
echo "installing versitygw $want into .cache/bin (about 85 s from empty caches)"
GOBIN="$PWD/.cache/bin" go install "github.com/versity/versitygw/cmd/versitygw@$want"
go version -m "$bin" | grep -E "^[[:space:]]+mod[[:space:]]" || true
