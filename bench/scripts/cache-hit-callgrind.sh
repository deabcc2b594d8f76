#!/usr/bin/env bash
# User-space instructions per request of a cache hit and a cache miss, next to a fixed
# response, a static file and the plain proxy, all 13 bytes (bench/RESULTS.md).
# Usage: bench/scripts/cache-hit-callgrind.sh [target/release/scb]
# Needs valgrind, wrk, curl, nginx (the origin). One worker, no access log, no [metrics].
set -euo pipefail
. "$(dirname "$0")/cache-origin.sh"
bin=${1:-target/release/scb}
work=$(mktemp -d)
trap 'kill $origin 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/www/static"
printf 'hello, world\n' > "$work/www/static/a.txt"
touch -d 2024-01-01 "$work/www/static/a.txt"
write_origin_conf "$work" 18190
nginx -e stderr -c "$work/nginx.conf" &
origin=$!
cat > "$work/scb.toml" <<TOML
[server]
workers = 1
[[listen]]
addr = "127.0.0.1:18191"
[log]
access = false
$(cache_routes "$work" 18190 256MiB)
TOML
write_unique_lua "$work"
for path in /respond /static/a.txt /proxy/a /a /miss/; do
    out="$work/cg.out"
    rm -f "$out"
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
        "$bin" run "$work/scb.toml" >"$work/scb.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do curl -sf -o /dev/null http://127.0.0.1:18191/respond && break; sleep 0.2; done
    # The first request fills the cache; the ones measured are hits (but under /miss/).
    for _ in 1 2 3; do curl -sf -o /dev/null "http://127.0.0.1:18191$path"; done
    script=()
    if [ "$path" = /miss/ ]; then script=(-s "$work/unique.lua"); fi
    callgrind_control -i on "$pid" >/dev/null
    n=$(wrk -t1 -c8 -d10s "${script[@]}" "http://127.0.0.1:18191$path" | awk '/requests in/ {print $1}')
    callgrind_control -i off "$pid" >/dev/null
    kill "$pid"; wait "$pid" 2>/dev/null || true
    total=$(awk '/^totals:/ {print $2; exit}' "$out")
    echo "$path: $n requests, $((total / n)) instructions per request"
done
