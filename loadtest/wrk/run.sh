#!/bin/bash
# run.sh STAGE [SECS] [CONNS]: on the fleet of fleet.sh, reset product 1 to
# 100 units under STAGE, hammer its buy route with three wrk (one per
# instance, CONNS connections each, SECS seconds), then /healthz the same
# way for the ceiling. Prints one line: the orders and stock in MySQL, the
# sell-out time as MySQL saw it (stockwatch), answered/s, the ceiling,
# their ratio, the 503 share, and the answers by status and problem type.
set -uo pipefail
cd "$(dirname "$0")"
STAGE=$1; SECS=${2:-4}; C=${3:-150}
OUT=${WRK_OUT:-/tmp/seckill-wrk}
DSN=${WRK_DSN:-root:@tcp(127.0.0.1:3306)/seckill_wrk}
DB=${DSN##*/}
T="Authorization: Bearer wrk-admin-token"
curl -sf -XPOST -H "$T" -H 'Content-Type: application/json' -d '{"stock":100}' http://127.0.0.1:18081/api/v1/admin/products/1/reset >/dev/null || echo "reset failed" >&2
for i in 1 2 3; do
  curl -sf -XPUT -H "$T" -H 'Content-Type: application/json' -d "{\"stage\":\"$STAGE\"}" http://127.0.0.1:1808$i/api/v1/admin/stage >/dev/null || echo "stage switch on instance $i failed" >&2
done
"$OUT/stockwatch" -dsn "$DSN" -for $((SECS + 1))s >"$OUT/sw.txt" &
for i in 1 2 3; do
  WRK_PREFIX=$STAGE-$RANDOM-$i wrk -t2 -c"$C" -d"${SECS}s" -s buyer.lua http://127.0.0.1:1808$i/api/v1/products/1/buy >"$OUT/out$i.txt" 2>&1 &
done
wait
counts() { cat "$OUT"/out[123].txt | grep STATUS | tr ' ' '\n' | grep = ; }
tot=$(counts | awk -F= '{s[$1]+=$2} END {for (k in s) printf "%s=%d\n", k, s[k]}' | sort | tr '\n' ' ')
all=$(counts | awk -F= '{s+=$2} END {print s+0}')
n503=$(counts | grep '^503' | awk -F= '{s+=$2} END {print s+0}')
rps=$(awk '/Requests\/sec/ {s+=$2} END {printf "%.0f", s}' "$OUT"/out[123].txt)
for i in 1 2 3; do wrk -t2 -c"$C" -d"${SECS}s" http://127.0.0.1:1808$i/healthz >"$OUT/hz$i.txt" 2>&1 & done
wait
hz=$(awk '/Requests\/sec/ {s+=$2} END {printf "%.0f", s}' "$OUT"/hz[123].txt)
n=$(mariadb -uroot -h127.0.0.1 "$DB" -N -e "SELECT COUNT(*) FROM orders WHERE product_id=1")
stock=$(mariadb -uroot -h127.0.0.1 "$DB" -N -e "SELECT stock FROM products WHERE id=1")
sell=$(sed -n 's/selltime=//p' "$OUT/sw.txt")
printf "%-12s orders=%s db_stock=%s sell=%s answered/s=%s healthz/s=%s ratio=%.2f 503share=%.4f | %s\n" \
  "$STAGE" "$n" "$stock" "$sell" "$rps" "$hz" "$(echo "$rps/$hz" | bc -l)" "$(echo "$n503/$all" | bc -l)" "$tot"
