#!/usr/bin/env bash
# Write the test fixtures that the tests/fixtures/make_*.py scripts can write, into the git-ignored
# tests/fixtures/made/, and check every one against tests/fixtures/manifest.sha256 (a mismatch fails,
# naming the file). The packages they run on are pinned in tests/fixtures/requirements.txt and
# installed from PyPI into target/fixtures-venv; Mistral's tekken vocabulary comes from the pinned
# mistral_common wheel. The venv also holds the openai client that tests/cli/serve.rs runs. A warm
# rerun, with the venv current and every file present and matching, only checks the sums.
# Needs the real models of scripts/fetch-models.sh (gemma4-vocab.gguf is cut from Gemma 3 270M's).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
fixtures=tests/fixtures
venv=target/fixtures-venv
stamp="$venv/requirements.txt"
if ! cmp -s "$fixtures/requirements.txt" "$stamp"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    -r "$fixtures/requirements.txt"
  cp "$fixtures/requirements.txt" "$stamp"
fi

if python3 $fixtures/make_all.py check $fixtures/made 2>/dev/null; then
  exit 0
fi

tekken=target/fixtures-cache/tekken_240911.json
if [ ! -f "$tekken" ]; then
  mkdir -p target/fixtures-cache
  wheels="$(mktemp -d)"
  trap 'rm -rf "$wheels"' EXIT
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps -d "$wheels" \
    mistral_common==1.13.1
  "$venv/bin/python" - "$wheels" "$tekken" <<'PY'
import glob, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
(whl,) = glob.glob(wheels + "/mistral_common-1.13.1-*.whl")
with zipfile.ZipFile(whl) as z, open(out + ".part", "wb") as f:
    f.write(z.read("mistral_common/data/tekken_240911.json"))
PY
  mv "$tekken.part" "$tekken"
fi

KILN_TEKKEN_JSON="$root/$tekken" "$venv/bin/python" $fixtures/make_all.py make
