import json, subprocess, sys
gold, name, path = sys.argv[1], sys.argv[2], sys.argv[3]
extra = sys.argv[4:]
viol = total = 0; worst = 0
# The golden README's rule for real models (|d| <= 1.0 + 0.03 |logit|); the first rule was 0.5 + 0.02 |logit|.
ABS, REL = 1.0, 0.03
for case in json.load(open(gold))['models'][name]['greedy']:
    steps = case['steps']
    out = subprocess.run(['/tmp/lc/tf', path, ','.join(map(str, case['prompt_ids'])), ','.join(str(s['token']) for s in steps),
                          ';'.join(','.join(str(t) for t, _ in s['top5']) for s in steps)] + extra, capture_output=True, text=True).stdout
    for line, s in zip(out.strip().split('\n'), steps):
        for v, (_, w) in zip(map(float, line.split()[2:]), s['top5']):
            r = abs(v - w) / (ABS + REL * abs(w)); total += 1; viol += r > 1; worst = max(worst, r)
print(f"violations {viol} of {total}; worst error/tolerance {worst:.2f}")
