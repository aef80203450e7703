#!/usr/bin/env bash
# Runs on the lent GPU machine (see prepare.sh; `bash scripts/gpu-device/sweep.sh`): picks the shape of the
# per-type decode mat-vec (KILN_WGPU_MATVEC=WG,ROWS,GATED_ROWS) and the keys per decode attention split
# (KILN_WGPU_ATTN_KEYS), both in docs/gpu.md. First `kiln check` against the CPU on the 1B Llama shape with each
# entry of SHAPES; then, on the 8B shape and then the 1B, kiln's tg128 with each entry of SHAPES and of KEYS,
# and ROUNDS rounds (default 5) alternating llama.cpp, kiln's default and kiln with the fastest of each. On an
# H200 about five minutes after the machine starts (2026-11-30: its first version, with 8 shapes and 4 key
# counts, picked the attention's 8 keys a split).
set -u
cd "$(dirname "$0")/../.."
source scripts/gpu-device/setup.sh
SHAPES=${SHAPES:-"256,2,4 128,2,4 128,4,4 64,2,4 64,4,4 64,2,2"}
KEYS=${KEYS:-"8 16 32"}
wait
ls -la $M $M8
echo "== kiln check against the CPU, 1B shape ($(date +%T))"
for s in $SHAPES; do
    echo "$s: $(KILN_WGPU_MATVEC=$s timeout 60 $W/kiln check -m $M -n 2 "The capital of France is" 2>&1 |
        grep -E "^top-1|^PASS|^FAIL|rror" | tr '\n' ' ')"
done
fastest() { sort -k2 -g -r | head -1 | cut -d' ' -f1; }
for shape in 8b 1b; do
    MODEL=$M8
    [ $shape = 1b ] && MODEL=$M
    echo "== $shape: tg128 by mat-vec shape, then by attention keys ($(date +%T))"
    echo "default $(kt X=1)"
    for s in $SHAPES; do echo "$s $(kt KILN_WGPU_MATVEC=$s)"; done | tee /tmp/shapes-$shape
    for k in $KEYS; do echo "$k $(kt KILN_WGPU_ATTN_KEYS=$k)"; done | tee /tmp/keys-$shape
    s=$(fastest < /tmp/shapes-$shape) k=$(fastest < /tmp/keys-$shape)
    echo "== $shape rounds: fastest shape $s, keys $k ($(date +%T))"
    echo "llama warm-up: $(lb)"
    VARIANTS="kiln kiln-tuned=KILN_WGPU_MATVEC=$s+KILN_WGPU_ATTN_KEYS=$k"
    rounds "${ROUNDS:-5}"
done
echo "== done ($(date +%T))"
