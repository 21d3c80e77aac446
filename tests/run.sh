#!/usr/bin/env bash
# The whole test suite against a real PostgreSQL: $DATABASE_URL when set, else the embedded server.
# Extra arguments go to pytest, e.g. `bash tests/run.sh -m "not slow"` for the quick run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../example_project/bootstrap.sh"
cd "$ROOT"
status=0
"$PY" -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$status"
