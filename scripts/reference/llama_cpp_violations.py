"""How many top-5 checks of a golden file llama.cpp itself fails under the golden README's rule for real models
(|d| <= 1.0 + 0.03 |logit|), run with other settings or another build.

usage: [TF=path/to/tf] python3 llama_cpp_violations.py GOLDEN NAME MODEL [kv] [fa]
  TF: `llama_cpp_teacher_force.cpp` built (default /tmp/lc/tf); built against another llama.cpp build's libraries
  (say one configured with GGML_NATIVE=OFF, which is AVX2 here), it measures how far that build's float order
  alone moves the logits. kv, fa: the tool's KV cache type and flash attention arguments."""
import json, os, subprocess, sys

gold, name, path = sys.argv[1], sys.argv[2], sys.argv[3]
extra = sys.argv[4:]
tool = os.environ.get("TF", "/tmp/lc/tf")
viol = total = 0; worst = 0.0; sq = 0.0; per_case = []
# The first rule was 0.5 + 0.02 |logit|.
ABS, REL = 1.0, 0.03
for case in json.load(open(gold))['models'][name]['greedy']:
    steps = case['steps']
    out = subprocess.run([tool, path, ','.join(map(str, case['prompt_ids'])), ','.join(str(s['token']) for s in steps),
                          ';'.join(','.join(str(t) for t, _ in s['top5']) for s in steps)] + extra,
                         capture_output=True, text=True, check=True).stdout
    misses = 0
    for line, s in zip(out.strip().split('\n'), steps):
        for v, (_, w) in zip(map(float, line.split()[2:]), s['top5']):
            d = abs(v - w); r = d / (ABS + REL * abs(w))
            total += 1; misses += r > 1; worst = max(worst, r); sq += d * d
    viol += misses; per_case.append(misses)
print(f"violations {viol} of {total} (per prompt {per_case}); worst error/tolerance {worst:.2f}; "
      f"rms {(sq / total) ** 0.5:.3f}")
