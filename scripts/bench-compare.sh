#!/usr/bin/env bash
# kiln against llama.cpp, side by side: runs `kiln bench` and `llama-bench` alternately (A B, B A, …) on
# each model with the same tests and threads, keeps each tool's best mean per test over the rounds (so
# noise from other work on the machine hits both), and prints the kiln / llama.cpp ratio per test and
# the median of the rounds' own ratios (the fairer figure where the machine's speed drifts).
#
# usage: scripts/bench-compare.sh [-l LLAMA_BENCH] [-k KILN] [-t THREADS] [-n ROUNDS] [-r REPS] MODEL...
#   -l  llama-bench binary (or env LLAMA_BENCH; default: llama-bench on PATH)
#   -k  kiln binary (or env KILN; default: target/release/kiln, built if missing)
#   -t  threads (default 2)   -n  rounds per tool (default 3)   -r  repetitions per run (default 3)
# Tests (issue #10): models whose file name contains "-shape" (random-weight stand-ins for 1-2B
# models) get pp128 and tg32; other models get pp512, pp128, tg64 and tg32 after 2048 tokens.
# Set TESTS_FULL / TESTS_SHORT to override, as `-p LIST -n LIST [-d DEPTH]` runs separated by ';'.
set -euo pipefail

LLAMA_BENCH=${LLAMA_BENCH:-llama-bench}
KILN=${KILN:-}
THREADS=2
ROUNDS=3
REPS=3
while getopts "l:k:t:n:r:h" opt; do
    case $opt in
        l) LLAMA_BENCH=$OPTARG ;;
        k) KILN=$OPTARG ;;
        t) THREADS=$OPTARG ;;
        n) ROUNDS=$OPTARG ;;
        r) REPS=$OPTARG ;;
        *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -eq 0 ]; then
    echo "bench-compare: give one or more model files (-h for usage)" >&2
    exit 2
fi
if ! command -v "$LLAMA_BENCH" > /dev/null; then
    echo "bench-compare: llama-bench not found ('$LLAMA_BENCH'); pass -l PATH or set LLAMA_BENCH" >&2
    exit 2
fi
if [ -z "$KILN" ]; then
    KILN="$(dirname "$0")/../target/release/kiln"
    [ -x "$KILN" ] || cargo build --release --manifest-path "$(dirname "$0")/../Cargo.toml" >&2
fi

TESTS_FULL=${TESTS_FULL:-"-p 512,128 -n 64;-p 0 -n 32 -d 2048"}
TESTS_SHORT=${TESTS_SHORT:-"-p 128 -n 32"}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for model in "$@"; do
    if [ ! -f "$model" ]; then
        echo "bench-compare: no such model file: $model" >&2
        exit 2
    fi
    case "$(basename "$model")" in
        *-shape*) tests=$TESTS_SHORT ;;
        *) tests=$TESTS_FULL ;;
    esac
    IFS=';' read -ra runs <<< "$tests"
    for round in $(seq 1 "$ROUNDS"); do
        for run in "${runs[@]}"; do
            # Odd rounds run kiln first, even rounds llama-bench first, so neither tool always
            # follows the other.
            tools="kiln llama"
            [ $((round % 2)) -eq 0 ] && tools="llama kiln"
            for tool in $tools; do
                case $tool in
                    kiln) cmd=("$KILN" bench) ;;
                    *) cmd=("$LLAMA_BENCH") ;;
                esac
                echo "[$(basename "$model") round $round] $(basename "${cmd[0]}") $run" >&2
                # shellcheck disable=SC2086 # $run is a list of flags
                "${cmd[@]}" -m "$model" $run -t "$THREADS" -r "$REPS" -o jsonl 2> /dev/null \
                    | sed "s|^|$tool\t$round\t$model\t|" >> "$out/results"
            done
        done
    done
done

python3 - "$out/results" "$THREADS" <<'EOF'
import json, os, statistics, sys
best = {}    # (model, test) -> {tool: avg_ts}
rounds = {}  # (model, test) -> {round: {tool: avg_ts}}
share = {}   # (model, test) -> kiln's best weights share of read bandwidth
order = []
for line in open(sys.argv[1]):
    tool, rnd, model, js = line.rstrip("\n").split("\t", 3)
    r = json.loads(js)
    p, g, d = r.get("n_prompt", 0), r.get("n_gen", 0), r.get("n_depth", 0)
    test = (f"pp{p}" if p else f"tg{g}") + (f" @ d{d}" if d else "")
    key = (os.path.basename(model), test)
    if key not in best:
        best[key], rounds[key] = {}, {}
        order.append(key)
    rounds[key].setdefault(rnd, {})[tool] = r["avg_ts"]
    if r["avg_ts"] > best[key].get(tool, 0):
        best[key][tool] = r["avg_ts"]
        if tool == "kiln" and r.get("roofline_fraction") is not None:
            share[key] = r["roofline_fraction"]
print(f"kiln / llama.cpp, {sys.argv[2]} threads: each tool's best mean t/s over alternating rounds, and")
print("the median of the rounds' own ratios (each round runs both tools back to back), with the\n"
      "number of rounds and their range\n")
print("| model | test | kiln t/s | llama.cpp t/s | kiln / llama.cpp | median of rounds | kiln weights / read BW |")
print("|---|---|---:|---:|---:|---:|---:|")
for key in order:
    k, l = best[key].get("kiln"), best[key].get("llama")
    ratio = f"{k / l:.2f}×" if k and l else "—"
    pairs = [v["kiln"] / v["llama"] for v in rounds[key].values() if v.get("kiln") and v.get("llama")]
    median = (f"{statistics.median(pairs):.2f}× ({len(pairs)}, {min(pairs):.2f}–{max(pairs):.2f})"
              if pairs else "—")
    bw = f"{100 * share[key]:.0f} %" if key in share else ""
    fmt = lambda v: f"{v:.2f}" if v else "—"
    print(f"| {key[0]} | {key[1]} | {fmt(k)} | {fmt(l)} | {ratio} | {median} | {bw} |")
EOF
