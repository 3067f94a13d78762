#!/usr/bin/env bash
# Lint (ruff check + ruff format --check) and type-check (mypy strict on src/).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
