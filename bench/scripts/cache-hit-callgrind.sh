#!/usr/bin/env bash
# User-space instructions per request of a cache hit, next to a fixed response and a
# static file of the same 13 bytes (bench/RESULTS.md, 2026-12-04), until the harness has
# a cache scenario. Usage: bench/scripts/cache-hit-callgrind.sh [target/release/scb]
# Needs valgrind, wrk, curl, python3. One worker, no access log, no [metrics].
set -euo pipefail
bin=${1:-target/release/scb}
work=$(mktemp -d)
trap 'kill $origin 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/www/static"
printf 'hello, world\n' > "$work/www/a.txt"
cp "$work/www/a.txt" "$work/www/static/a.txt"
touch -d 2024-01-01 "$work/www/a.txt" "$work/www/static/a.txt"
(cd "$work/www" && exec python3 -m http.server 18190 --bind 127.0.0.1 >/dev/null 2>&1) &
origin=$!
cat > "$work/scb.toml" <<TOML
[server]
workers = 1
[[listen]]
addr = "127.0.0.1:18191"
[log]
access = false
[[route]]
path = "/respond"
respond = { body = "hello, world\n" }
[[route]]
prefix = "/static/"
static = { root = "$work/www" }
[[route]]
prefix = "/"
proxy = { upstreams = ["127.0.0.1:18190"] }
cache = { max_bytes = "64MiB" }
TOML
for path in /respond /static/a.txt /a.txt; do
    out="$work/cg.out"
    rm -f "$out"
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
        "$bin" run "$work/scb.toml" >"$work/scb.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do curl -sf -o /dev/null http://127.0.0.1:18191/respond && break; sleep 0.2; done
    # The first request fills the cache; the ones measured are hits.
    for _ in 1 2 3; do curl -sf -o /dev/null "http://127.0.0.1:18191$path"; done
    callgrind_control -i on "$pid" >/dev/null
    n=$(wrk -t1 -c8 -d10s "http://127.0.0.1:18191$path" | awk '/requests in/ {print $1}')
    callgrind_control -i off "$pid" >/dev/null
    kill "$pid"; wait "$pid" 2>/dev/null || true
    total=$(awk '/^totals:/ {print $2; exit}' "$out")
    echo "$path: $n requests, $((total / n)) instructions per request"
done
