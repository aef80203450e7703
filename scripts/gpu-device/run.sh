#!/usr/bin/env bash
# Runs on the lent GPU machine (see prepare.sh): kiln's GPU backend against llama.cpp's Vulkan build on the 1B
# Llama shape, then the 8B shape, both written here and quantized to QUANT (default Q4_K_M). In order: the
# adapter's features; the GPU op tests and the decode fusions' tests (while the models are written); the host's
# own time per token (wgpu's no-op backend); what each kernel costs in the real stream (KILN_WGPU_REPEAT: its
# dispatches run twice, the time a token gains); `kiln check` against the CPU with the prefill GEMM on cooperative
# matrices (tiles of 64 and 128 activation rows, the prefill attention on them too and not) and without; ROUNDS
# rounds (default 6) on the 1B shape alternating which tool runs first: kiln-base too where prepare.sh built one,
# and kiln with each switch of #46 against its default (the fusions off, the residual add and norm as a dispatch
# of their own instead of the output and down projections' epilogue, Q4_K and Q6_K Q/K/V as two dispatches, the
# attention's reduce as a dispatch of its own, the cooperative GEMM and attention in tiles of 64 and of 128 rows,
# the GEMM alone, the decode attention reading its shape from parameters, the decode attention v2 with its
# subgroups walking keys of their own, v2 in workgroups of 128 invocations: twice the subgroups on a split's keys,
# the decode attention's splits sized to two workgroups a compute unit, a read-back's 300 µs spin before it
# blocks; the float mat-vecs, measured before, only in the kernel costs and a profile), and the cooperative GEMM
# with v2 (kiln-coopv2, the switches that are off by default together); kiln's decode against the copy bandwidth
# it measures on the 8B shape, then ROUNDS8 rounds (default 5) there of the variants VARIANTS8 names (default:
# kiln-base, kiln, the separate norms, and the cooperative GEMM and v2); the 8B shape's per-kernel profile; each
# kind of mat-vec over the 8B shape's layers (`kiln bench --kernels`) with the default, float and 128,2,4 shapes;
# the timed dispatches of a few tokens into $OUT/dispatches.txt and the per-kernel profile, with and without the
# switches; last, each tool's median t/s and the median (and range) of its per-round ratio to llama.cpp
# (summarize.py). All of it also in $OUT/run.log. On an H200 the run took about six minutes after the machine
# started with nine variants; with the fifteen here and six rounds, expect about eight (ROUNDS=5 or a shorter
# VARIANTS8 where device time is short).
set -u
cd "$(dirname "$0")/../.."
# Everything it prints is also in $OUT/run.log (the device tool returns only the output's tail).
[ -n "${OUT:-}" ] && exec > >(tee "$OUT/run.log") 2>&1
source scripts/gpu-device/setup.sh
echo "== gpu_ops ($(date +%T))"
KILN_REQUIRE_GPU=1 timeout 120 $W/gpu-tests gpu_ops --test-threads 8 2>&1 | grep -E "test result|panicked|NMSE"
echo "== the decode fusions (their last-workgroup epilogues) against their dispatches, bit for bit, and the CPU"
KILN_REQUIRE_GPU=1 timeout 120 $W/gpu-tests fused_ norms_after --test-threads 4 --nocapture 2>&1 |
    grep -E "test result|panicked|fused decode|legacy quants"
echo "== the prefill GEMM and attention on the tensor cores (KILN_WGPU_COOP=1) against the CPU"
KILN_WGPU_COOP=1 KILN_REQUIRE_GPU=1 timeout 60 $W/gpu-tests cooperative_ 2>&1 |
    grep -E "test result|panicked|NMSE|_coop"
wait
ls -la $M $M8
echo "== host only (no-op backend), tg128: $(kt KILN_WGPU_NOOP=1)"
echo "== each kernel's cost in the stream: tg128 with its dispatches run twice"
echo "none: $(kt X=1)"
for op in matvec matvec_norm matvec_rope_kv matvec_gated_packed attention attention_packed attention_reduce_packed add_rms_norm rms_norm quantize_q8k; do echo "$op: $(kt KILN_WGPU_REPEAT=$op)"; done
echo "attention_v2_packed (KILN_WGPU_ATTN_V2=1): $(kt KILN_WGPU_ATTN_V2=1 KILN_WGPU_REPEAT=attention_v2_packed)"
echo "none (KILN_WGPU_ATTN_V2=1): $(kt KILN_WGPU_ATTN_V2=1)"
echo "== llama warm-up: $(lb)"
VARIANTS="kiln kiln-unfused=KILN_WGPU_FUSE=0 kiln-normsep=KILN_WGPU_FUSE_NORM=0 kiln-unmixed=KILN_WGPU_MIX=0 kiln-reduce=KILN_WGPU_ATTN_REDUCE=1 kiln-coop=KILN_WGPU_COOP=1 kiln-coopgemm=KILN_WGPU_COOP=1+KILN_WGPU_COOP_ATTN=0 kiln-coop128=KILN_WGPU_COOP=1+KILN_WGPU_COOP_ROWS=128 kiln-attnparam=KILN_WGPU_ATTN_CONST=0 kiln-attnv2=KILN_WGPU_ATTN_V2=1 kiln-attnv2w128=KILN_WGPU_ATTN_V2=1+KILN_WGPU_ATTN_V2_WG=128 kiln-attncores=KILN_WGPU_ATTN_SPLITS=cores kiln-spin=KILN_WGPU_SPIN_US=300"
# The cooperative GEMM and the decode attention v2 together.
TOGETHER="kiln-coopv2=KILN_WGPU_COOP=1+KILN_WGPU_ATTN_V2=1"
VARIANTS="$VARIANTS $TOGETHER"
[ -x $W/kiln-base ] && VARIANTS="kiln-base $VARIANTS"
# On the 8B shape (longer runs) the variants VARIANTS8 names: by default kiln-base, kiln, the separate norms, and
# the cooperative GEMM (tiles of 64 rows) and v2.
VARIANTS8=$(for v in $VARIANTS; do
    case " ${VARIANTS8:-kiln-base kiln kiln-normsep kiln-coop kiln-attnv2 kiln-attnv2w128 kiln-coopv2} " in
        *" ${v%%=*} "*) echo "$v" ;;
    esac
done)
echo "== host only, float mat-vecs: $(kt KILN_WGPU_NOOP=1 KILN_WGPU_INT_DOT=0)"
echo "== host only, unfused: $(kt KILN_WGPU_NOOP=1 KILN_WGPU_FUSE=0)"
P="The history of the city begins in the third century, when a small settlement of fishermen grew along the river and"
for cr in 0,64,1 1,64,0 1,64,1 1,128,1; do
    IFS=, read -r c rows attn <<< "$cr"
    echo "== kiln check, 1B shape, KILN_WGPU_COOP=$c, $rows rows, KILN_WGPU_COOP_ATTN=$attn: $(KILN_WGPU_COOP=$c \
        KILN_WGPU_COOP_ROWS=$rows KILN_WGPU_COOP_ATTN=$attn timeout 60 $W/kiln check --backend gpu -m $M \
        -n 16 --format json "$P" 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin)
print("rms", d["rms"], "top-1", d["top1_agreement"], "pass", d["pass"])' 2>&1 | tail -1)"
done
echo "== 1B rounds ($(date +%T))"
rounds "${ROUNDS:-6}" | tee $W/rounds-1b.txt
MODEL=$M8
echo "== 8B: kiln's decode against the copy bandwidth it measures ($(date +%T))"
for s in X=1 KILN_WGPU_FUSE=0 KILN_WGPU_INT_DOT=0; do
    echo "$s"; timeout 120 env $s $W/kiln bench --backend gpu -m $M8 -p 0 -n 128 -r 2 2>&1 | grep -E "tg128|model"
done
echo "== 8B llama warm-up: $(lb)"
echo "== 8B rounds ($(date +%T))"
VARIANTS=$VARIANTS8
rounds "${ROUNDS8:-5}" | tee $W/rounds-8b.txt
echo "== 8B profile ($(date +%T))"
timeout 60 $W/kiln bench --backend gpu -m $M8 --no-roofline -p 512 -n 128 -r 1 --profile | sed -n '/^profile/,$p'
echo "== 8B mat-vecs by kind over every layer (bench --kernels), default, float, 128,2,4 ($(date +%T))"
for s in X=1 KILN_WGPU_INT_DOT=0 KILN_WGPU_MATVEC=128,2,4; do
    echo "$s"; timeout 90 env $s $W/kiln bench --backend gpu -m $M8 --kernels -r 5 2>&1 | grep "^|"
done
MODEL=$M
echo "== profiles ($(date +%T))"
KILN_PROFILE_DISPATCHES=1 timeout 60 $W/kiln bench --backend gpu -m $M --no-roofline -p 0 -n 4 -r 1 --profile \
    > ${OUT:-$W}/dispatches.txt 2>&1
timeout 60 $W/kiln bench --backend gpu -m $M --no-roofline -p 512 -n 128 -r 1 --profile | sed -n '/^profile/,$p'
echo "== profile with KILN_WGPU_FUSE=0"
KILN_WGPU_FUSE=0 timeout 60 $W/kiln bench --backend gpu -m $M --no-roofline -p 512 -n 128 -r 1 --profile |
    sed -n '/^profile/,$p'
echo "== profile with KILN_WGPU_COOP=1"
KILN_WGPU_COOP=1 timeout 60 $W/kiln bench --backend gpu -m $M --no-roofline -p 512 -n 128 -r 1 --profile |
    sed -n '/^profile/,$p'
echo "== profile with KILN_WGPU_INT_DOT=0"
KILN_WGPU_INT_DOT=0 timeout 60 $W/kiln bench --backend gpu -m $M --no-roofline -p 512 -n 128 -r 1 --profile |
    sed -n '/^profile/,$p'
# The rounds' medians last, where the device tool's tail of the output keeps them.
python3 scripts/gpu-device/summarize.py 1B $W/rounds-1b.txt 8B $W/rounds-8b.txt
echo "== done ($(date +%T))"
