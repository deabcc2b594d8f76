#!/usr/bin/env bash
# User-space instructions per keep-alive `GET /respond` on a worker with few connections
# (wrk -c8), on a crowded one (wrk -c300: past the 256 connections above which an idle
# connection gives back what it holds between requests; wrk sends each connection's next
# request only after its answer, so every request there ends in an idle wait), and on a
# crowded one whose connections each wait 1.5 s before their next request (long enough
# to be parked: 10 rounds of one request on each of 300 connections, then a pause)
# (bench/RESULTS.md).
# Usage: bench/scripts/crowded-callgrind.sh [target/release/scb]
# Needs valgrind, wrk, curl, python3. One worker, no access log, no [metrics].
set -euo pipefail
bin=${1:-target/release/scb}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
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
cat > "$work/rounds.py" <<'PY'
import socket, sys, time
conns = [socket.create_connection(("127.0.0.1", 18193)) for _ in range(300)]
req = b"GET /respond HTTP/1.1\r\nHost: t\r\n\r\n"
def ask_all():
    for c in conns:
        c.sendall(req)
    for c in conns:
        got = b""
        while not got.endswith(b"hello, world\n"):
            chunk = c.recv(4096)
            if not chunk:
                sys.exit("closed")
            got += chunk
ask_all()
time.sleep(1.5)
# Opened and asked once: instrumentation goes on now.
open(sys.argv[1] + "/ready", "w").close()
while not __import__("os").path.exists(sys.argv[1] + "/go"):
    time.sleep(0.05)
n = 0
for _ in range(10):
    ask_all()
    n += len(conns)
    time.sleep(1.5)
open(sys.argv[1] + "/count", "w").write(str(n))
PY
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
done
out="$work/cg.out"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
    "$bin" run "$work/scb.toml" >"$work/scb.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -sf -o /dev/null http://127.0.0.1:18193/respond && break; sleep 0.2; done
# Instrumented from the first measured round on (the connections opened and asked once).
python3 "$work/rounds.py" "$work" &
client=$!
while [ ! -e "$work/ready" ]; do sleep 0.1; done
callgrind_control -i on "$pid" >/dev/null
touch "$work/go"
wait "$client"
callgrind_control -i off "$pid" >/dev/null
n=$(cat "$work/count")
kill "$pid"; wait "$pid" 2>/dev/null || true
total=$(awk '/^totals:/ {print $2; exit}' "$out")
echo "parked: $n requests after 1.5 s idle each, $((total / n)) instructions per request"
