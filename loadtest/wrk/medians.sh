#!/bin/bash
# medians.sh [ROUNDS]: ROUNDS (5) rounds of run.sh over the five safe
# stages, then a Markdown table of each stage's medians.
cd "$(dirname "$0")"
R=${1:-5}; OUT=${WRK_OUT:-/tmp/seckill-wrk}; : >"$OUT/rounds.txt"
for _ in $(seq 1 "$R"); do
  for s in db-atomic redis-lock redlock redis-atomic redis-stream redis-sharded; do ./run.sh $s | tee -a "$OUT/rounds.txt"; done
done
python3 - "$OUT/rounds.txt" <<'PY'
import collections, re, statistics as st, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r'(\S+)\s+orders=(\d+) db_stock=(\d+) sell=([\d.]+s|none) answered/s=(\d+) healthz/s=(\d+) ratio=([\d.]+) 503share=([\d.]+)', line)
    if m:
        rows[m[1]].append(m)
print("| stage | rounds exact | answered/s | /healthz/s | ratio | 503 share | sell-out time |")
print("|---|--:|--:|--:|--:|--:|--:|")
for s in ["db-atomic", "redis-lock", "redlock", "redis-atomic", "redis-stream", "redis-sharded"]:
    ms = rows[s]
    if not ms:
        continue
    exact = sum(1 for m in ms if m[2] == '100' and m[3] == '0')
    med = lambda i: st.median(float(m[i]) for m in ms)
    # stockwatch may miss a sale too quick for its 2 ms polls ("none"):
    # the sell-out time is over the rounds it saw, and says how many.
    sells = [float(m[4].rstrip('s')) for m in ms if m[4] != 'none']
    sell = f"{st.median(sells)*1000:.0f} ms (max {max(sells)*1000:.0f}; {len(sells)} of {len(ms)} seen)" if sells else "not seen"
    print(f"| {s} | {exact}/{len(ms)} | {med(5):,.0f} | {med(6):,.0f} | {med(7):.2f} | {100*med(8):.2f}% | {sell} |")
PY
