#!/usr/bin/env bash
# Runs on the lent GPU machine (see prepare.sh): kiln's GPU backend against llama.cpp's Vulkan build on the 1B
# Llama shape. In order: the GPU op tests; the host's own time per token (wgpu's no-op backend); what each kernel
# costs in the real stream (KILN_WGPU_REPEAT: its dispatches run twice, the time a token gains); ROUNDS rounds
# (default 8) alternating which tool runs first, kiln-base too where prepare.sh built one; the timed dispatches
# of a few tokens into $OUT/dispatches.txt. QUANT (default Q4_K_M) picks the file's type. The ratios are the
# medians of the rounds' ratios. On an H200 the whole run takes about two minutes after the machine starts.
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
M=$W/1b.gguf
(python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $D/gguf-*.whl 2>/dev/null
 PYTHONPATH=/tmp/site python3 $D/make-1b.py $W >/dev/null
 $W/bin/llama-quantize $W/llama32-1b-shape.f16.gguf $M "${QUANT:-Q4_K_M}" 16 >/dev/null 2>&1) &
echo "== gpu_ops"
KILN_REQUIRE_GPU=1 timeout 120 $W/gpu-tests gpu_ops --test-threads 8 2>&1 | grep -E "test result|panicked|NMSE"
wait
kb() { local b=$1; shift; timeout 60 env "$@" $W/$b bench --backend gpu -m $M --no-roofline -p 512 -n 128 -r 1 \
    2>/dev/null | grep -E "pp512|tg128" | awk -F'|' '{printf "%s ", $(NF-1)}'; }
kt() { timeout 60 env "$@" $W/kiln bench --backend gpu -m $M --no-roofline -p 0 -n 128 -r 2 2>/dev/null |
    grep -E "tg128" | awk -F'|' '{printf "%s ", $(NF-1)}'; }
lb() { timeout 60 $W/bin/llama-bench -m $M -ngl 99 -p 512 -n 128 -r 1 2>/dev/null |
    grep -E "pp512|tg128" | awk -F'|' '{printf "%s ", $(NF-1)}'; }
echo "== host only (no-op backend), tg128: $(kt KILN_WGPU_NOOP=1)"
echo "== each kernel's cost in the stream: tg128 with its dispatches run twice"
echo "none: $(kt X=1)"
for op in matvec attention add_rms_norm rope_kv; do echo "$op: $(kt KILN_WGPU_REPEAT=$op)"; done
echo "== llama warm-up: $(lb)"
kilns=kiln
[ -x $W/kiln-base ] && kilns="kiln-base kiln"
# Each switch of #46 alone (off by default until this run picks): KILN_WGPU_INT_DOT=1.
kiln_runs() { for k in $kilns; do line+=" $k: $(kb $k)"; done; line+=" kiln-idot: $(kb kiln KILN_WGPU_INT_DOT=1)"; }
echo "== host only, integer-dot mat-vecs: $(kt KILN_WGPU_NOOP=1 KILN_WGPU_INT_DOT=1)"
for op in matvec quantize_q8k; do echo "$op (int-dot): $(kt KILN_WGPU_INT_DOT=1 KILN_WGPU_REPEAT=$op)"; done
for r in $(seq 1 "${ROUNDS:-8}"); do
    line="round $r"
    if [ $((r % 2)) = 1 ]; then
        line+=" llama: $(lb)"; kiln_runs
    else
        kiln_runs; line+=" llama: $(lb)"
    fi
    echo "$line"
done
KILN_PROFILE_DISPATCHES=1 timeout 60 $W/kiln bench --backend gpu -m $M --no-roofline -p 0 -n 4 -r 1 --profile \
    > ${OUT:-$W}/dispatches.txt 2>&1
timeout 60 $W/kiln bench --backend gpu -m $M --no-roofline -p 512 -n 128 -r 1 --profile | sed -n '/^profile/,$p'
