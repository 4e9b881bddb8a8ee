#!/usr/bin/env bash
# The Python package's tests: build the module into target/venv (the pytorch engine's venv,
# which has torch) with maturin in the dev profile, as an editable install, then run pytest on
# python/tests. maturin and pytest come from PyPI. Usage: bash scripts/test-python.sh [PYTEST ARGS]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$PWD/target/venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import torch, PIL' >/dev/null 2>&1; then
    "$venv/bin/pip" install -q torch torchvision pillow
fi
if [ ! -x "$venv/bin/maturin" ] || ! "$venv/bin/python" -c 'import pytest' >/dev/null 2>&1; then
    "$venv/bin/pip" install -q 'maturin>=1.5,<2' pytest
fi
(
    cd python
    VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --quiet
)
exec "$venv/bin/python" -m pytest python/tests -q "$@"
