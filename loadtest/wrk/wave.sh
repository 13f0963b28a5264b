#!/bin/bash
# wave.sh STAGE: the post-sale wave. On the fleet of fleet.sh, reset
# product 1 to 100 units under STAGE, sell them out with a dashboard burst
# of 300 (sent by instance 1 alone, so instances 2 and 3 meet the wave
# knowing nothing), then three wrk (150 connections each, 4 s) of buyers
# who all come too late. Every answer should be 409 sold-out.
set -uo pipefail
cd "$(dirname "$0")"
STAGE=$1; OUT=${WRK_OUT:-/tmp/seckill-wrk}
T="Authorization: Bearer wrk-admin-token"
curl -sf -XPOST -H "$T" -H 'Content-Type: application/json' -d '{"stock":100}' http://127.0.0.1:18081/api/v1/admin/products/1/reset >/dev/null || echo "reset failed" >&2
for i in 1 2 3; do
  curl -sf -XPUT -H "$T" -H 'Content-Type: application/json' -d "{\"stage\":\"$STAGE\"}" http://127.0.0.1:1808$i/api/v1/admin/stage >/dev/null || echo "stage switch on instance $i failed" >&2
done
sold=$(curl -s -XPOST -H "$T" -H 'Content-Type: application/json' -d "{\"kind\":\"product\",\"item_id\":1,\"n\":300,\"stage\":\"$STAGE\"}" http://127.0.0.1:18081/api/v1/admin/burst |
  python3 -c 'import json,sys; c=json.load(sys.stdin)["counts"]; print(c["created"]+c["accepted"])')
for i in 1 2 3; do
  WRK_PREFIX=wave-$STAGE-$RANDOM-$i wrk -t2 -c150 -d4s -s buyer.lua http://127.0.0.1:1808$i/api/v1/products/1/buy >"$OUT/out$i.txt" 2>&1 &
done
wait
tot=$(cat "$OUT"/out[123].txt | grep STATUS | tr ' ' '\n' | grep = | awk -F= '{s[$1]+=$2} END {for (k in s) printf "%s=%d\n", k, s[k]}' | sort | tr '\n' ' ')
echo "$STAGE: the burst sold $sold; the wave: $tot"
