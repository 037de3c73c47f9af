#!/usr/bin/env bash
# The whole test suite on a fresh machine: makes .venv (once), installs klog with its test
# extra, then runs pytest. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,spark]'
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
