#!/usr/bin/env bash
# Runs on the lent GPU machine (see prepare.sh): kiln's GPU backend against llama.cpp's Vulkan build on the 1B
# Llama shape, in ROUNDS rounds (default 8) alternating which runs first, then kiln's per-op profile and the GPU
# op tests. QUANT (default Q4_K_M) picks the file's type. Prints one line per round; the ratios are the median
# of the rounds.
set -u
cd "$(dirname "$0")/.."
[ -d .dev ] || cd ..
D=$PWD/.dev W=/tmp/w
mkdir -p $W
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $icd ] && export VK_DRIVER_FILES=$icd
tar xJf $D/llama-vk.tar.xz -C $W
for b in kiln kiln-base gpu-tests; do
    [ -f $D/$b.xz ] && xz -dc $D/$b.xz > $W/$b && chmod +x $W/$b
done
export LD_LIBRARY_PATH=$W/bin
$W/kiln devices | grep -qi nvidia || { VK_LOADER_DEBUG=error,warn $W/kiln devices; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $D/gguf-*.whl 2>/dev/null
PYTHONPATH=/tmp/site python3 $D/make-1b.py $W >/dev/null
M=$W/1b.gguf
$W/bin/llama-quantize $W/llama32-1b-shape.f16.gguf $M "${QUANT:-Q4_K_M}" 16 >/dev/null 2>&1
kb() { timeout 60 $W/$1 bench --backend gpu -m $M --no-roofline -p 512 -n 128 -r 1 2>/dev/null |
    grep -E "pp512|tg128" | awk -F'|' '{printf "%s ", $(NF-1)}'; }
lb() { timeout 60 $W/bin/llama-bench -m $M -ngl 99 -p 512 -n 128 -r 1 2>/dev/null |
    grep -E "pp512|tg128" | awk -F'|' '{printf "%s ", $(NF-1)}'; }
kilns=kiln
[ -x $W/kiln-base ] && kilns="kiln-base kiln"
for r in $(seq 1 "${ROUNDS:-8}"); do
    line="round $r"
    if [ $((r % 2)) = 1 ]; then
        line+=" llama: $(lb)"; for k in $kilns; do line+=" $k: $(kb $k)"; done
    else
        for k in $kilns; do line+=" $k: $(kb $k)"; done; line+=" llama: $(lb)"
    fi
    echo "$line"
done
timeout 60 $W/kiln bench --backend gpu -m $M --no-roofline -p 512 -n 128 -r 1 --profile | sed -n '/^profile/,$p'
KILN_REQUIRE_GPU=1 timeout 120 $W/gpu-tests gpu_ops --test-threads 4 2>&1 | grep -E "test result|panicked|NMSE"
