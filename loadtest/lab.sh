#!/bin/sh
# Runs the lab (go run ./loadtest, with this script's arguments).
#
# - With --targets among the arguments it runs the lab against those and
#   never starts a demo.
# - Otherwise the targets are the instances on LAB_PORTS (default
#   8081,8082,8083, the demo's). When the first answers, the lab uses them
#   as they are; it finds their admin token in SECKILL_ADMIN_TOKEN or, when
#   that is unset, in the token file the demo writes (.demo/admin-token).
# - When nothing answers there, it starts `seckill demo` on those ports
#   (its front page on a free port), with a throw-away database and admin
#   token, and stops it afterwards.
# - With LAB_FLEET=serve it starts three `seckill serve` instances instead,
#   on the real services: MySQL at SECKILL_MYSQL_DSN (required; the
#   database must exist) and Redis at SECKILL_REDIS_ADDR (default
#   127.0.0.1:6379), plus three redis-servers for redlock on
#   LAB_REDLOCK_PORTS (default 16381,16382,16383). The lab then also counts
#   in MySQL directly, --baselines can measure the raw MySQL loop, and the
#   lab reads the CPU of all four Redis servers (--cpu-redis) beside the
#   instances'.
#
# The exit status is the lab's, so a failed verdict fails `make lab`.
set -u
BIN=${BIN:-bin/seckill}
GO=${GO:-go}
LAB_PORTS=${LAB_PORTS:-8081,8082,8083}

for arg in "$@"; do
	case $arg in
	--targets | --targets=* | -targets | -targets=*)
		exec "$GO" run ./loadtest "$@"
		;;
	esac
done

# The fleets it starts believe X-Forwarded-For from loopback, where the
# lab runs: the scalper scenarios name each simulated person's address
# there (set SECKILL_TRUSTED_PROXIES to choose otherwise).
lab_proxies=127.0.0.1,::1
# They share one waiting-room signing key, so that a ticket joined on one
# instance polls on another (the waiting-room scenario spreads its
# accounts' requests over the instances); set SECKILL_ROOM_KEYS to choose.
lab_room_keys=lab:$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
ports=$(printf '%s\n' "$LAB_PORTS" | tr ',' ' ')
targets=
instances=
for port in $ports; do
	targets="$targets${targets:+,}http://127.0.0.1:$port"
	instances="$instances${instances:+,}127.0.0.1:$port"
done
if [ -z "$targets" ]; then
	echo "lab: LAB_PORTS lists no port" >&2
	exit 2
fi
first=${ports%% *}

pid=
tmp=
pids=
cpu_redis=
cleanup() {
	rc=$?
	for p in $pid $pids; do
		kill -INT "$p" 2>/dev/null
	done
	for p in $pid $pids; do
		wait "$p" 2>/dev/null
	done
	if [ -n "$tmp" ]; then
		rpids=
		for f in "$tmp"/redis-*.pid; do
			[ -f "$f" ] && rpids="$rpids $(cat "$f")"
		done
		for p in $rpids; do
			kill "$p" 2>/dev/null
		done
		# A redis-server writes its log and pid file as it exits: wait for
		# it (at most 5 s) before removing the folder under it.
		tries=0
		for p in $rpids; do
			while kill -0 "$p" 2>/dev/null && [ "$tries" -lt 50 ]; do
				sleep 0.1
				tries=$((tries + 1))
			done
		done
		if [ "$rc" -eq 0 ]; then
			rm -rf "$tmp"
		else
			# A failed run keeps the logs of what it started, for the
			# post-mortem.
			echo "lab: failed (exit $rc); the logs are kept in $tmp" >&2
		fi
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

healthy() { "$BIN" probe -timeout 1s "http://127.0.0.1:$1/healthz" >/dev/null 2>&1; }

if healthy "$first"; then
	if [ -n "${SECKILL_ADMIN_TOKEN:-}" ]; then
		echo "lab: using the instances already on $targets (admin token from SECKILL_ADMIN_TOKEN)" >&2
	else
		echo "lab: using the instances already on $targets (admin token from the demo's token file, .demo/admin-token by default)" >&2
	fi
elif [ "${LAB_FLEET:-demo}" = serve ]; then
	if [ -z "${SECKILL_MYSQL_DSN:-}" ]; then
		echo "lab: LAB_FLEET=serve needs SECKILL_MYSQL_DSN, e.g. root:@tcp(127.0.0.1:3306)/seckill_lab (the database must exist)" >&2
		exit 2
	fi
	tmp=$(mktemp -d)
	SECKILL_ADMIN_TOKEN=${SECKILL_ADMIN_TOKEN:-lab-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')}
	export SECKILL_ADMIN_TOKEN SECKILL_MYSQL_DSN
	redlock=
	for rport in $(printf '%s\n' "${LAB_REDLOCK_PORTS:-16381,16382,16383}" | tr ',' ' '); do
		redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" --daemonize yes \
			--pidfile "$tmp/redis-$rport.pid" --logfile "$tmp/redis-$rport.log" || exit 1
		redlock="$redlock${redlock:+,}127.0.0.1:$rport"
	done
	cpu_redis="${SECKILL_REDIS_ADDR:-127.0.0.1:6379},$redlock"
	"$BIN" migrate >"$tmp/migrate.log" 2>&1 || { cat "$tmp/migrate.log" >&2; exit 1; }
	echo "lab: starting three seckill serve on $instances (logs in $tmp)" >&2
	i=0
	for port in $ports; do
		i=$((i + 1))
		SECKILL_ADDR="127.0.0.1:$port" SECKILL_INSTANCE="serve-$i" SECKILL_REDIS_ADDR="${SECKILL_REDIS_ADDR:-127.0.0.1:6379}" \
			SECKILL_TRUSTED_PROXIES="${SECKILL_TRUSTED_PROXIES:-$lab_proxies}" SECKILL_ROOM_KEYS="${SECKILL_ROOM_KEYS:-$lab_room_keys}" \
			SECKILL_REDLOCK_ADDRS="$redlock" SECKILL_LOG_LEVEL=${SECKILL_LOG_LEVEL:-warn} \
			"$BIN" serve >"$tmp/serve-$i.log" 2>&1 &
		pids="${pids:-} $!"
	done
	for port in $ports; do
		tries=0
		until healthy "$port"; do
			tries=$((tries + 1))
			if [ "$tries" -gt 120 ]; then
				echo "lab: serve did not come up on :$port:" >&2
				cat "$tmp"/serve-*.log >&2
				exit 1
			fi
			sleep 0.25
		done
	done
else
	tmp=$(mktemp -d)
	SECKILL_ADMIN_TOKEN=${SECKILL_ADMIN_TOKEN:-lab-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')}
	export SECKILL_ADMIN_TOKEN
	if [ -n "${SECKILL_MYSQL_DSN:-}" ]; then
		# The demo keeps its orders in SQLite: a DSN left over from serve
		# work would make the lab count someone else's MySQL database.
		echo "lab: ignoring SECKILL_MYSQL_DSN: the demo does not use MySQL (LAB_FLEET=serve does)" >&2
		unset SECKILL_MYSQL_DSN
	fi
	echo "lab: starting seckill demo on $instances (log in $tmp/demo.log)" >&2
	# shellcheck disable=SC2086 # LAB_DEMO_FLAGS is a list of flags
	SECKILL_TRUSTED_PROXIES="${SECKILL_TRUSTED_PROXIES:-$lab_proxies}" SECKILL_ROOM_KEYS="${SECKILL_ROOM_KEYS:-$lab_room_keys}" SECKILL_DEMO_DB="$tmp/demo.db" "$BIN" demo -addr 127.0.0.1:0 -instances "$instances" ${LAB_DEMO_FLAGS:-} >"$tmp/demo.log" 2>&1 &
	pid=$!
	for port in $ports; do
		tries=0
		until healthy "$port"; do
			tries=$((tries + 1))
			if ! kill -0 "$pid" 2>/dev/null || [ "$tries" -gt 120 ]; then
				echo "lab: the demo did not come up on :$port:" >&2
				cat "$tmp/demo.log" >&2
				exit 1
			fi
			sleep 0.25
		done
	done
fi

status=0
# The Redis servers of a serve fleet it started go before "$@", so that a
# --cpu-redis of the caller's wins.
"$GO" run ./loadtest --targets "$targets" ${cpu_redis:+--cpu-redis="$cpu_redis"} "$@" || status=$?
exit "$status"
