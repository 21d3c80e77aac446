# Sourced by example_project/demo.sh and tests/run.sh: make sure .venv at the repository root has
# this project installed (editable) with its test, embedded-PostgreSQL, browser-test, tasks (the
# django-tasks backport, so the django.tasks backend runs on Django 5.2 too) and metrics extras. Re-installs only
# when pyproject.toml changed. Override the interpreter with PYTHON=/path/to/python3.x.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PGJOBS_VENV:-$ROOT/.venv}"

python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

if [ ! -x "$VENV/bin/python" ]; then
  PY="${PYTHON:-}"
  if [ -z "$PY" ]; then
    for candidate in python3 python3.13 python3.12 python3.11; do
      if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then PY="$candidate"; break; fi
    done
  fi
  if [ -z "$PY" ] || ! python_ok "$PY"; then
    echo "django-pgjobs needs Python 3.11 or newer (set PYTHON=/path/to/python3.11+)." >&2
    exit 1
  fi
  echo "Creating $VENV with $("$PY" --version)" >&2
  "$PY" -m venv "$VENV"
fi

STAMP="$VENV/.pgjobs-installed"
WANT="$("$VENV/bin/python" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())' < "$ROOT/pyproject.toml")"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "Installing django-pgjobs[test,embedded,e2e,tasks,metrics] into $VENV ..." >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[test,embedded,e2e,tasks,metrics]"
  echo "$WANT" > "$STAMP"
fi
PY="$VENV/bin/python"
export PY ROOT VENV
