# Sourced from the repository root by run.sh and sweep.sh on the lent GPU machine: unpacks what
# prepare.sh put in .dev/ and .gl/, checks that kiln sees the NVIDIA GPU and prints its features, starts
# writing the 1B and 8B Llama shapes in QUANT (default Q4_K_M) in the background ($M, $M8: `wait` for
# them), and defines the measurements on $MODEL, each printing its t/s: kb (kiln pp512 and tg128; its first
# argument is the binary, the rest the environment), kt (kiln tg128 alone, 2 repetitions; arguments the
# environment), lb (llama-bench pp512 and tg128); and `rounds N`: N rounds alternating whether llama.cpp runs
# first or the kiln runs of VARIANTS (each NAME, or NAME=VAR=VALUE[+VAR=VALUE…] for variables set; kiln-base* names
# run the binary prepare.sh built from BASE), one line of t/s a round.
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
echo "== devices"; $W/kiln devices
M=$W/1b.gguf M8=$W/8b.gguf
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $D/gguf-*.whl 2>/dev/null
(PYTHONPATH=/tmp/site python3 $D/make-1b.py $W >/dev/null
 $W/bin/llama-quantize $W/llama32-1b-shape.f16.gguf $M "${QUANT:-Q4_K_M}" 16 >/dev/null 2>&1) &
(PYTHONPATH=/tmp/site python3 $D/make-8b.py $W >/dev/null
 $W/bin/llama-quantize $W/llama31-8b-shape.f16.gguf $M8 "${QUANT:-Q4_K_M}" 16 >/dev/null 2>&1
 rm -f $W/llama31-8b-shape.f16.gguf) &
MODEL=$M
kb() { local b=$1; shift; timeout 90 env "$@" $W/$b bench --backend gpu -m $MODEL --no-roofline -p 512 -n 128 \
    -r 1 2>/dev/null | grep -E "pp512|tg128" | awk -F'|' '{printf "%s ", $(NF-1)}'; }
kt() { timeout 60 env "$@" $W/kiln bench --backend gpu -m $MODEL --no-roofline -p 0 -n 128 -r 2 2>/dev/null |
    grep -E "tg128" | awk -F'|' '{printf "%s ", $(NF-1)}'; }
lb() { timeout 90 $W/bin/llama-bench -m $MODEL -ngl 99 -p 512 -n 128 -r 1 2>/dev/null |
    grep -E "pp512|tg128" | awk -F'|' '{printf "%s ", $(NF-1)}'; }
VARIANTS=kiln
kiln_runs() {
    local v name env bin
    for v in $VARIANTS; do
        name=${v%%=*} env=${v#*=} bin=kiln
        [ "$env" = "$v" ] && env=X=1
        env=${env//+/ }
        [ "${name#kiln-base}" != "$name" ] && bin=kiln-base
        line+=" $name: $(kb $bin $env)"  # $env unquoted: one word per variable
    done
}
rounds() {
    for r in $(seq 1 "$1"); do
        line="round $r"
        if [ $((r % 2)) = 1 ]; then
            line+=" llama: $(lb)"; kiln_runs
        else
            kiln_runs; line+=" llama: $(lb)"
        fi
        echo "$line"
    done
}
