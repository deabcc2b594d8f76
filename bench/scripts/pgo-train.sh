#!/usr/bin/env bash
# The training run of a profile-guided build (`cargo xtask pgo`): an scb built with
# `-Cprofile-generate` serves the shapes the bench measures, and writes its profile when it
# exits (SIGTERM: a graceful shutdown, so the profile is whole).
# Usage: bench/scripts/pgo-train.sh INSTRUMENTED_SCB PROFILE_DIR
# One worker, `[metrics]` on (as production runs it), for each shape a few seconds of load:
# a fixed response, a small static file, the proxy, a cache hit and a miss (a local nginx as
# the origin), a connection per request, TLS HTTP/1.1 (keep-alive and a handshake per
# request), HTTP/2 with ten streams and with one, in the clear and over TLS.
# Needs nginx, wrk, h2load, curl, openssl. Ports 18290-18293 on 127.0.0.1.
set -euo pipefail
. "$(dirname "$0")/cache-origin.sh"
bin=$1
profiles=$2
for tool in nginx wrk h2load curl openssl; do
    command -v "$tool" >/dev/null || { echo "pgo-train: $tool is missing" >&2; exit 1; }
done
work=$(mktemp -d)
origin=
scb=
trap 'kill $scb $origin 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/www/static"
printf 'hello, world\n' > "$work/www/static/a.txt"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj /CN=localhost -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
write_origin_conf "$work" 18290
nginx -e stderr -c "$work/nginx.conf" &
origin=$!
cat > "$work/scb.toml" <<TOML
metrics = { listen = "127.0.0.1:18293" }
[server]
workers = 1
[[listen]]
addr = "127.0.0.1:18291"
[[listen]]
addr = "127.0.0.1:18292"
tls = { cert = "$work/cert.pem", key = "$work/key.pem" }
[log]
access = false
$(cache_routes "$work" 18290 64MiB)
TOML
write_unique_lua "$work"
LLVM_PROFILE_FILE="$profiles/scb-%p-%m.profraw" "$bin" run "$work/scb.toml" >"$work/scb.log" 2>&1 &
scb=$!
for _ in $(seq 1 100); do curl -sf -o /dev/null http://127.0.0.1:18291/respond && break; sleep 0.2; done
plain=http://127.0.0.1:18291
tls=https://127.0.0.1:18292
load() { echo "pgo-train: $*" >&2; "$@" >/dev/null; }
for path in /respond /static/a.txt /proxy/a /a; do load wrk -t1 -c32 -d3s "$plain$path"; done
load wrk -t1 -c32 -d3s -s "$work/unique.lua" "$plain/"
load wrk -t1 -c32 -d3s -H "Connection: close" "$plain/respond"
load wrk -t1 -c32 -d3s "$tls/static/a.txt"
load wrk -t1 -c32 -d3s -H "Connection: close" "$tls/respond"
load h2load -c16 -m10 -D 3 "$plain/respond"
load h2load -c16 -m10 -D 3 "$tls/static/a.txt"
load h2load -c16 -m1 -D 3 "$tls/proxy/a"
curl -sf -o /dev/null http://127.0.0.1:18293/metrics
kill -TERM "$scb"
wait "$scb"
scb=
ls "$profiles"/*.profraw >/dev/null
