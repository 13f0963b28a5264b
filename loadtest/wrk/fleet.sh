#!/bin/bash
# fleet.sh: build seckill and stockwatch, then start three `seckill serve`
# on 127.0.0.1:18081-18083 over MariaDB/MySQL (WRK_DSN, default database
# seckill_wrk on 127.0.0.1:3306, created if missing) and Redis
# 127.0.0.1:6379, with RedLock on Redis servers at 6393-6395 (started here
# when nothing answers there). Stop the fleet with: pkill -f "$WRK_OUT/seckill serve"
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${WRK_OUT:-/tmp/seckill-wrk}
DSN=${WRK_DSN:-root:@tcp(127.0.0.1:3306)/seckill_wrk}
mkdir -p "$OUT"
go build -tags nomsgpack -o "$OUT/seckill" ./cmd/seckill
go build -o "$OUT/stockwatch" ./loadtest/wrk/stockwatch
mariadb -uroot -h127.0.0.1 -e "CREATE DATABASE IF NOT EXISTS ${DSN##*/}"
for p in 6393 6394 6395; do
  redis-cli -p $p ping >/dev/null 2>&1 || redis-server --daemonize yes --port $p --save "" --appendonly no --bind 127.0.0.1 >/dev/null
done
export SECKILL_MYSQL_DSN="$DSN" SECKILL_REDIS_ADDR=127.0.0.1:6379 \
  SECKILL_REDLOCK_ADDRS=127.0.0.1:6393,127.0.0.1:6394,127.0.0.1:6395 \
  SECKILL_ADMIN_TOKEN=wrk-admin-token SECKILL_LOG_LEVEL=warn
"$OUT/seckill" migrate >/dev/null
for i in 1 2 3; do
  SECKILL_ADDR=127.0.0.1:1808$i SECKILL_INSTANCE=wrk-$i nohup "$OUT/seckill" serve >"$OUT/serve$i.log" 2>&1 &
done
for i in 1 2 3; do
  for _ in $(seq 1 60); do curl -sf http://127.0.0.1:1808$i/readyz >/dev/null && break; sleep 0.5; done
done
echo "fleet up on 127.0.0.1:18081-18083 (logs in $OUT)"
