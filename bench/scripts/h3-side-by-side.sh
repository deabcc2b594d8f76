#!/usr/bin/env bash
# The same HTTP/3 requests, sent by aioquic (scb-bin/tests/h3/client.py), to scb and to
# Caddy serving the same files, fixed answer and proxy: a markdown table of what each
# answered, side by side (bench/RESULTS.md keeps one).
# Usage: bench/scripts/h3-side-by-side.sh [target/release/scb]
# Needs caddy (Debian's 2.6 serves HTTP/3), openssl, python3 with aioquic ($SCB_PYTHON).
set -euo pipefail
bin=$(realpath "${1:-target/release/scb}")
client=$(realpath "$(dirname "$0")/../../scb-bin/tests/h3/client.py")
python=${SCB_PYTHON:-python3}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"

# A CA and a certificate for localhost it signed (aioquic verifies the chain and name).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
    -out ca.pem -subj /CN=side-by-side-ca -days 2 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout site.key \
    -out site.csr -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost\n' > ext
openssl x509 -req -in site.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out site.pem \
    -days 2 -extfile ext 2>/dev/null

mkdir -p root
printf 'hello, quic\n' > root/hello.txt
head -c 3000000 /dev/urandom > root/big.bin

# The upstream both proxy to: reads a body whole (Content-Length or chunked), sends it back.
cat > upstream.py <<'PY'
import http.server, sys
class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
PY
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up=$(free_port); scb_port=$(free_port); caddy_port=$(free_port)
python3 upstream.py "$up" & pids+=($!)

cat > scb.toml <<TOML
[server]
workers = 1
[[listen]]
addr = "127.0.0.1:$scb_port"
tls = { cert = "$work/site.pem", key = "$work/site.key" }
http3 = true
[[route]]
path = "/respond"
respond = { body = "fixed" }
[[route]]
prefix = "/echo/"
proxy = { upstreams = ["127.0.0.1:$up"] }
[[route]]
prefix = "/"
static = { root = "$work/root" }
TOML
"$bin" run --config scb.toml > scb.log 2>&1 & pids+=($!)

cat > Caddyfile <<CADDY
{
	admin off
	auto_https off
	servers {
		protocols h1 h2 h3
	}
}
https://localhost:$caddy_port {
	bind 127.0.0.1
	tls $work/site.pem $work/site.key
	respond /respond "fixed" 200
	reverse_proxy /echo/* 127.0.0.1:$up
	root * $work/root
	file_server
}
CADDY
XDG_DATA_HOME=$work/xdg XDG_CONFIG_HOME=$work/xdg caddy run --adapter caddyfile \
    --config Caddyfile > caddy.log 2>&1 & pids+=($!)
sleep 2

"$python" - "$client" "$work/ca.pem" "$scb_port" "$caddy_port" <<'PY'
import json, subprocess, sys
client, ca, ports = sys.argv[1], sys.argv[2], {"scb": int(sys.argv[3]), "Caddy": int(sys.argv[4])}

def run(port, requests, concurrent=False):
    job = {"host": "127.0.0.1", "port": port, "server_name": "localhost", "ca": ca,
           "requests": requests, "concurrent": concurrent}
    out = subprocess.run([sys.executable, client], input=json.dumps(job), capture_output=True,
                         text=True, timeout=120)
    return json.loads(out.stdout)

def cell(r, *fields):
    if "error" in r:
        return "client error: " + r["error"]
    if r["status"] is None:
        code = r["reset"] if r["reset"] is not None else (r["connection_closed"] or {}).get("error_code")
        return f"reset 0x{code:x}" if isinstance(code, int) else "no answer"
    text = f'{r["status"]}, {r["body_len"]} B'
    for f in fields:
        if f in r["headers"]:
            text += f'; {f}: {r["headers"][f]}'
    return text

def pseudo(extra=(), path=True):
    h = [[":method", "GET"], [":scheme", "https"], [":authority", "localhost"]]
    if path:
        h.append([":path", "/hello.txt"])
    return {"raw": h + [list(e) for e in extra], "path": "-"}

rows = {}
for name, port in ports.items():
    first = run(port, [
        {"path": "/hello.txt"},
        {"path": "/hello.txt", "headers": [["range", "bytes=0-4"]]},
        {"method": "HEAD", "path": "/big.bin"},
        {"path": "/big.bin"},
        {"method": "POST", "path": "/echo/up", "body_size": 2500000},
        {"path": "/respond"},
        {"method": "HEAD", "path": "/respond"},
        {"path": "/missing"},
        {"path": "/../../etc/passwd"},
    ])
    etag = first[0]["headers"].get("etag", '"none"')
    cond = run(port, [{"path": "/hello.txt", "headers": [["if-none-match", etag]]}])
    many = run(port, [{"path": "/hello.txt"}] * 50, concurrent=True)
    bad = run(port, [pseudo(path=False), {"path": "/hello.txt"},
                     pseudo([("X-Upper", "1")]), {"path": "/hello.txt"},
                     pseudo([("connection", "keep-alive")]), {"path": "/hello.txt"}])
    rows[name] = [
        cell(first[0], "content-length", "alt-svc"), cell(first[1], "content-range"),
        cell(first[2], "content-length"), cell(first[3]), cell(first[4]), cell(first[5]),
        cell(first[6], "content-length"), cell(first[7]), cell(first[8]), cell(cond[0]),
        f'{sum(r.get("status") == 200 for r in many)} of 50 answered 200',
        cell(bad[0]), cell(bad[1]), cell(bad[2]), cell(bad[3]), cell(bad[4]), cell(bad[5]),
    ]
cases = ["GET /hello.txt", "Range bytes=0-4", "HEAD /big.bin (3 MB)", "GET /big.bin",
         "POST 2.5 MB through the proxy", "GET /respond", "HEAD /respond", "GET /missing",
         "GET /../../etc/passwd", "If-None-Match (its ETag)", "50 streams at once",
         "no :path", "the next request", "uppercase field name", "the next request",
         "connection: keep-alive", "the next request"]
print("| request | " + " | ".join(rows) + " |")
print("|---|" + "---|" * len(rows))
for i, case in enumerate(cases):
    print(f"| {case} | " + " | ".join(rows[n][i] for n in rows) + " |")
PY
