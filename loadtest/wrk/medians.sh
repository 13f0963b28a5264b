#!/bin/bash
# medians.sh [ROUNDS]: ROUNDS (5) rounds of run.sh over the five safe
# stages, then a Markdown table of each stage's medians.
cd "$(dirname "$0")"
R=${1:-5}; OUT=${WRK_OUT:-/tmp/seckill-wrk}; : >"$OUT/rounds.txt"
for _ in $(seq 1 "$R"); do
  for s in db-atomic redis-lock redlock redis-atomic redis-stream; do ./run.sh $s | tee -a "$OUT/rounds.txt"; done
done
python3 - "$OUT/rounds.txt" <<'PY'
import collections, re, statistics as st, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r'(\S+)\s+orders=(\d+) db_stock=(\d+) sell=([\d.]+)s answered/s=(\d+) healthz/s=(\d+) ratio=([\d.]+) 503share=([\d.]+)', line)
    if m:
        rows[m[1]].append(m)
print("| stage | rounds exact | answered/s | /healthz/s | ratio | 503 share | sell-out time |")
print("|---|--:|--:|--:|--:|--:|--:|")
for s in ["db-atomic", "redis-lock", "redlock", "redis-atomic", "redis-stream"]:
    ms = rows[s]
    if not ms:
        continue
    exact = sum(1 for m in ms if m[2] == '100' and m[3] == '0')
    med = lambda i: st.median(float(m[i]) for m in ms)
    print(f"| {s} | {exact}/{len(ms)} | {med(5):,.0f} | {med(6):,.0f} | {med(7):.2f} | {100*med(8):.2f}% | {med(4)*1000:.0f} ms (max {max(float(m[4]) for m in ms)*1000:.0f}) |")
PY
