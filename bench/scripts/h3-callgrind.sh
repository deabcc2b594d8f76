#!/bin/bash
# User-space instructions per request for HTTP/3 and TLS HTTP/2 small-file requests, under
# callgrind, instrumentation on only while the load runs (the handshakes of 8 connections
# are included: about 1,100 instructions a request here).
#
# usage: bench/scripts/h3-callgrind.sh SCB_BINARY CONFIG PORT OUTDIR
#   CONFIG: an scb config with a TLS listener on 127.0.0.1:PORT with `http3 = true` that
#   serves /small.txt (bench/out/*/work/profile-h3-static-small/callgrind/scb.toml, as
#   `bench profile h3-static-small` writes it, is one); needs valgrind, h2load and the
#   bench's h3load (target/release/h3load).
set -euo pipefail
BIN=$1 CONFIG=$2 PORT=$3 OUT=$4
H3LOAD=${H3LOAD:-$(dirname "$0")/../../target/release/h3load}
mkdir -p "$OUT"
taskset -c 0 valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$OUT/cg.%p.out" "$BIN" run --config "$CONFIG" >"$OUT/server.log" 2>&1 &
PID=$!
trap 'kill -9 $PID 2>/dev/null || true' EXIT
sleep 6
for kind in h3 h2; do
    if [ "$kind" = h3 ]; then
        load=("$H3LOAD" -c8 -m10 -t1 -D 6000ms "https://127.0.0.1:$PORT/small.txt")
    else
        load=(h2load -c8 -m10 -t1 -D 6 "https://127.0.0.1:$PORT/small.txt")
    fi
    taskset -c 1 "${load[@]}" >/dev/null 2>&1 # warm-up
    callgrind_control -z $PID >/dev/null 2>&1
    callgrind_control -i on $PID >/dev/null 2>&1
    n=$(taskset -c 1 "${load[@]}" 2>&1 | awk '/^requests:/ {print $2}')
    callgrind_control -i off $PID >/dev/null 2>&1
    callgrind_control -d $kind $PID >/dev/null 2>&1
    sleep 1
    file=$(ls -t "$OUT"/cg.$PID.out* | head -1)
    total=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    echo "$kind requests=$n instructions/request=$((total / n)) profile=$file"
done
