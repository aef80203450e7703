#!/usr/bin/env bash
# The whole test suite: fetch the real models if needed, then every test in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh
cargo test --release --all-targets "$@"
