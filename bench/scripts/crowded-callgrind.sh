#!/usr/bin/env bash
# User-space instructions per keep-alive `GET /respond` on a worker with few connections
# (wrk -c8) and on a crowded one (wrk -c300: past the 256 connections above which an idle
# connection gives back what it holds between requests; wrk sends each connection's next
# request only after its answer, so every request there ends in an idle wait).
# Usage: bench/scripts/crowded-callgrind.sh [target/release/scb]
# Needs valgrind, wrk, curl. One worker, no access log, no [metrics].
set -euo pipefail
bin=${1:-target/release/scb}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
keep=${KEEP:-}
cat > "$work/scb.toml" <<TOML
[server]
workers = 1
[[listen]]
addr = "127.0.0.1:18193"
[log]
access = false
[[route]]
path = "/respond"
respond = { body = "hello, world\n" }
TOML
ulimit -n 4096
for conns in 8 300; do
    out="$work/cg.out"
    rm -f "$out"
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
        "$bin" run "$work/scb.toml" >"$work/scb.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do curl -sf -o /dev/null http://127.0.0.1:18193/respond && break; sleep 0.2; done
    callgrind_control -i on "$pid" >/dev/null
    n=$(wrk -t1 -c"$conns" -d10s "http://127.0.0.1:18193/respond" | awk '/requests in/ {print $1}')
    callgrind_control -i off "$pid" >/dev/null
    kill "$pid"; wait "$pid" 2>/dev/null || true
    total=$(awk '/^totals:/ {print $2; exit}' "$out")
    echo "wrk -c$conns: $n requests, $((total / n)) instructions per request"
    if [ -n "$keep" ]; then cp "$out" "$keep.c$conns"; fi
done
