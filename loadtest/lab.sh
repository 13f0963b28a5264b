#!/bin/sh
# Runs the lab (go run ./loadtest, with this script's arguments) against the
# demo instances on :8081-:8083. When nothing answers there it starts
# `seckill demo` on a throw-away database with a known admin token, and
# stops it afterwards; a demo that was already running is left alone.
# The exit status is the lab's, so a failed verdict fails `make lab`.
set -u
BIN=${BIN:-bin/seckill}
GO=${GO:-go}
: "${SECKILL_ADMIN_TOKEN:=seckill-lab-admin}"
export SECKILL_ADMIN_TOKEN

pid=
tmp=
cleanup() {
	if [ -n "$pid" ]; then
		kill -INT "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	if [ -n "$tmp" ]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

healthy() { "$BIN" probe -timeout 1s "http://127.0.0.1:$1/healthz" >/dev/null 2>&1; }

if healthy 8081; then
	echo "lab: using the instances already on :8081-:8083 (admin token from SECKILL_ADMIN_TOKEN)" >&2
else
	tmp=$(mktemp -d)
	echo "lab: starting seckill demo (log in $tmp/demo.log)" >&2
	SECKILL_DEMO_DB="$tmp/demo.db" "$BIN" demo ${LAB_DEMO_FLAGS:-} >"$tmp/demo.log" 2>&1 &
	pid=$!
	for port in 8081 8082 8083; do
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
"$GO" run ./loadtest "$@" || status=$?
exit "$status"
