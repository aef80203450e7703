#!/usr/bin/env bash
# The whole test suite: fetch the real models and write the script-made fixtures if needed (both
# checked against their sha256 sums), then every test in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh
scripts/make-fixtures.sh
cargo test --release --all-targets "$@"
