#!/usr/bin/env bash
# The quickstart demo: install, migrate, enqueue a few hundred jobs and run them.
# Uses $DATABASE_URL when set, otherwise a private embedded PostgreSQL (left running for
# runserver/runjobs; `.venv/bin/python example_project/manage.py pgembedded stop` stops it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT/example_project"
"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py demo "$@"
