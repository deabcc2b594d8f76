#!/usr/bin/env bash
# System calls, context switches and CPU time per connection of a connection per request
# (`GET /respond` with `Connection: close`), counted by the kernel's tracepoints
# (`perf stat`), which slow nothing down: under strace the server falls so far behind that
# every request has arrived before its connection is accepted (bench/RESULTS.md).
# Server on CPU 0 (one worker), wrk on CPU 1, 64 connections, 5 s after 2 s of warm-up.
# Usage: bench/scripts/close-syscalls.sh scb [target/release/scb]
#        bench/scripts/close-syscalls.sh nginx [deferred]
# With KEEPALIVE=1 the clients keep their connections (no `Connection: close`): the same
# counts per request of a keep-alive connection ("a connection" in the output is then a
# request).
# Needs perf, wrk, curl, taskset, nginx.
set -euo pipefail
server=$1
work=$(mktemp -d)
trap 'kill $master 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
port=18197
if [ "$server" = scb ]; then
    cat > "$work/scb.toml" <<TOML
[server]
workers = 1
[[listen]]
addr = "127.0.0.1:$port"
[log]
access = false
[[route]]
path = "/respond"
respond = { body = "hello, world\n" }
TOML
    taskset -c 0 "${2:-target/release/scb}" run "$work/scb.toml" >"$work/log" 2>&1 &
    master=$!
else
    listen="127.0.0.1:$port"
    if [ "${2:-}" = deferred ]; then listen="$listen deferred"; fi
    cat > "$work/nginx.conf" <<NGINX
daemon off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/b; proxy_temp_path $work/p; fastcgi_temp_path $work/f;
    uwsgi_temp_path $work/u; scgi_temp_path $work/s;
    server { listen $listen; location /respond { return 200 "hello, world\n"; } }
}
NGINX
    taskset -c 0 nginx -e stderr -c "$work/nginx.conf" &
    master=$!
fi
for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/respond" && break; sleep 0.2; done
pid=$master
if [ "$server" != scb ]; then pid=$(pgrep -P "$master" | head -1); fi
close=(-H "Connection: close")
if [ "${KEEPALIVE:-}" = 1 ]; then close=(); fi
load() { taskset -c 1 wrk -t1 -c64 -d"$1" "${close[@]}" "http://127.0.0.1:$port/respond"; }
load 2s >/dev/null
events=task-clock,context-switches
for call in accept4 recvfrom sendto writev close epoll_ctl epoll_wait; do
    events="$events,syscalls:sys_enter_$call"
done
perf stat -e "$events" -p "$pid" -o "$work/stat" &
stat=$!
n=$(load 5s | awk '/requests in/ {print $1}')
kill -INT "$stat"; wait "$stat" 2>/dev/null || true
echo "$server ${2:-}: $n connections"
awk -v n="$n" '/task-clock/ {gsub(",", "", $1); printf "  %-28s %8.2f µs a connection\n", "cpu (task-clock)", $1 * 1000 / n}
    /context-switches|sys_enter/ {gsub(",", "", $1); sub("syscalls:sys_enter_", "", $2); printf "  %-28s %8.3f a connection\n", $2, $1 / n}' "$work/stat"
