#!/usr/bin/env bash
# Application gateways side by side: the same PHP front controller, run by the same php-fpm
# pool, through scb (`fastcgi` + `try_files`), nginx (`fastcgi_pass` as Laravel's and
# nginx's docs write it) and Caddy (`php_fastcgi`); and the same auth service in front of
# the same upstream through scb `forward_auth`, nginx `auth_request` and Caddy
# `forward_auth`. Prints a markdown table of what each answered (bench/RESULTS.md keeps one).
# Usage: bench/scripts/gateways-side-by-side.sh [path/to/scb]
#   (default target/release/scb, else target/debug/scb)
# Needs php-fpm (Debian's php8.2-fpm; $SCB_PHP_FPM names another), nginx, caddy, python3.
set -euo pipefail
root_dir=$(realpath "$(dirname "$0")/../..")
bin=${1:-}
if [ -z "$bin" ]; then
    for candidate in "$root_dir/target/release/scb" "$root_dir/target/debug/scb"; do
        [ -x "$candidate" ] && bin=$candidate && break
    done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "no scb binary (build one, or name it)" >&2; exit 2; }
bin=$(realpath "$bin")
fpm=${SCB_PHP_FPM:-$(command -v php-fpm8.2 || ls /usr/sbin/php-fpm* 2>/dev/null | head -1 || true)}
[ -n "$fpm" ] || { echo "php-fpm is not installed (Debian: php8.2-fpm)" >&2; exit 2; }
nginx=$(command -v nginx || echo /usr/sbin/nginx)

work=$(mktemp -d)
groups=()
# Every service leads a process group of its own (setsid): php-fpm's children and nginx's
# workers would otherwise outlive their master. `started` disowns each, so bash does not
# report them killed.
started() { groups+=("$!"); disown "$!"; }
stop_all() {
    for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
}
trap 'stop_all; rm -rf "$work"' EXIT
cd "$work"

# The application of scb-bin/tests/support/php.rs (INDEX_PHP and write_app).
mkdir -p public/blog public/uploads
cat > public/index.php <<'PHP'
<?php
$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
header('Content-Type: text/plain; charset=utf-8');
if ($path === '/') {
    echo "home\n";
} elseif (preg_match('#^/users/(\d+)$#', $path, $m)) {
    echo "user {$m[1]}\n";
} elseif ($path === '/form' && $_SERVER['REQUEST_METHOD'] === 'POST') {
    echo "hello {$_POST['name']} ({$_POST['lang']})\n";
} elseif ($path === '/upload' && $_SERVER['REQUEST_METHOD'] === 'POST') {
    $f = $_FILES['file'];
    echo "upload {$f['name']} {$f['size']} " . hash_file('sha256', $f['tmp_name']) . "\n";
} elseif ($path === '/redirect') {
    header('Location: /users/1');
} elseif ($path === '/created') {
    http_response_code(201);
    header('X-App: yes');
    echo "created\n";
} elseif ($path === '/error') {
    error_log('the application failed on purpose');
    trigger_error('boom', E_USER_ERROR);
} elseif ($path === '/sleep') {
    sleep(3);
    echo "slept\n";
} elseif ($path === '/env') {
    header('Content-Type: application/json');
    $keys = ['SCRIPT_FILENAME', 'SCRIPT_NAME', 'PATH_INFO', 'DOCUMENT_ROOT', 'REQUEST_URI',
             'QUERY_STRING', 'REQUEST_METHOD', 'REMOTE_ADDR', 'HTTPS', 'HTTP_PROXY',
             'HTTP_HOST', 'SERVER_PROTOCOL', 'CONTENT_LENGTH', 'HTTP_X_CUSTOM'];
    $out = [];
    foreach ($keys as $k) { $out[$k] = $_SERVER[$k] ?? null; }
    echo json_encode($out), "\n";
} else {
    http_response_code(404);
    echo "no route for $path\n";
}
PHP
printf '%s\n' "<?php header('Content-Type: text/plain'); echo \$_SERVER['SCRIPT_NAME'], '|', \$_SERVER['PATH_INFO'] ?? '', \"\\n\";" \
    > public/info.php
printf '%s\n' '<?php echo "blog index\n";' > public/blog/index.php
printf 'body { color: black }\n' > public/style.css
printf "<?php echo 'PWNED'; ?>\n" > public/uploads/evil.jpg

# The pool of scb-bin's FastCGI tests: static, errors logged (not shown), 16 MiB uploads.
cat > php-fpm.conf <<CONF
[global]
pid = $work/php-fpm.pid
error_log = $work/php-fpm.log
daemonize = no
[www]
listen = $work/php-fpm.sock
pm = static
pm.max_children = 4
catch_workers_output = yes
php_admin_flag[display_errors] = off
php_admin_flag[log_errors] = on
php_admin_value[upload_max_filesize] = 16M
php_admin_value[post_max_size] = 32M
php_admin_value[max_execution_time] = 30
CONF
setsid "$fpm" -n -F -R -y php-fpm.conf > php-fpm.out 2>&1 & started

# The auth service: 200 with Remote-User for `X-Test-Auth: ok` (none for `ok-anon`), a
# redirect to a login page for `login`, 401 otherwise. It says what it was sent in the
# Location (rd: X-Forwarded-Uri) and refuses a subrequest with a body.
cat > auth.py <<'PY'
import http.server, sys, urllib.parse
class Auth(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        length = int(self.headers.get("content-length") or 0)
        if length or self.headers.get("transfer-encoding"):
            self.send_response(400); self.send_header("content-length", "0"); self.end_headers()
            return
        mode = self.headers.get("x-test-auth", "")
        if mode in ("ok", "ok-anon"):
            self.send_response(200)
            if mode == "ok":
                self.send_header("Remote-User", "alice")
            self.send_header("Set-Cookie", "auth=internal")
        elif mode == "login":
            rd = urllib.parse.quote(self.headers.get("x-forwarded-uri", "?"), safe="")
            self.send_response(302)
            self.send_header("Location", "https://login.example/?rd=" + rd)
        else:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
        body = b"auth says no\n" if mode not in ("ok", "ok-anon") else b""
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_HEAD = answer
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Auth).serve_forever()
PY

# The upstream behind the auth check: says which Remote-User it was given, and how many
# bytes of body reached it.
cat > echo.py <<'PY'
import http.server, sys
class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        users = self.headers.get_all("remote-user") or ["-"]
        text = f"user={','.join(users)} body={len(body)}\n".encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)
    do_GET = do_POST = answer
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
PY

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
auth=$(free_port); up=$(free_port); scb_port=$(free_port); nginx_port=$(free_port); caddy_port=$(free_port)
setsid python3 auth.py "$auth" & auth_group=$!; started
setsid python3 echo.py "$up" & started

cat > scb.toml <<TOML
[server]
workers = 1
[[listen]]
addr = "127.0.0.1:$scb_port"

[[route]]
prefix = "/app/"
forward_auth = { upstream = "127.0.0.1:$auth", uri = "/api/verify", copy_headers = ["Remote-User"] }
proxy = { upstreams = ["127.0.0.1:$up"] }

[[route]]
prefix = "/"
try_files = ["{path}", "{path}/index.php", "/index.php?{query}"]
fastcgi = { upstreams = ["unix:$work/php-fpm.sock"], root = "$work/public", index = "index.php" }
TOML
setsid "$bin" run --config scb.toml > scb.log 2>&1 & started

# nginx as Laravel's deployment docs and nginx's PHP FastCGI example write it, with the
# upload limit raised to PHP's (nginx's default is 1 MiB); auth_request as Authelia's
# nginx docs write it (X-Forwarded-Method and -Uri set for the auth service).
cat > nginx.conf <<NGINX
user root;
worker_processes 1;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 1024; }
http {
    include /etc/nginx/mime.types;
    access_log off;
    client_body_temp_path $work/nginx-body;
    fastcgi_temp_path $work/nginx-fastcgi;
    proxy_temp_path $work/nginx-proxy;
    uwsgi_temp_path $work/nginx-uwsgi;
    scgi_temp_path $work/nginx-scgi;
    server {
        listen 127.0.0.1:$nginx_port;
        root $work/public;
        index index.php;
        client_max_body_size 16m;

        location /app/ {
            auth_request /_auth;
            auth_request_set \$user \$upstream_http_remote_user;
            proxy_set_header Remote-User \$user;
            proxy_pass http://127.0.0.1:$up;
        }
        location = /_auth {
            internal;
            proxy_pass http://127.0.0.1:$auth/api/verify;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Forwarded-Method \$request_method;
            proxy_set_header X-Forwarded-Uri \$request_uri;
        }

        location / {
            try_files \$uri \$uri/ /index.php?\$query_string;
        }
        location ~ \.php\$ {
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
            fastcgi_pass unix:$work/php-fpm.sock;
        }
    }
}
NGINX
setsid "$nginx" -e stderr -c "$work/nginx.conf" > nginx.log 2>&1 & started

# Caddy as its docs write it: php_fastcgi (its own try_files, split at .php, index.php),
# forward_auth with copy_headers.
cat > Caddyfile <<CADDY
{
	admin off
	auto_https off
}
http://:$caddy_port {
	bind 127.0.0.1
	route /app/* {
		forward_auth 127.0.0.1:$auth {
			uri /api/verify
			copy_headers Remote-User
		}
		reverse_proxy 127.0.0.1:$up
	}
	root * $work/public
	php_fastcgi unix/$work/php-fpm.sock
	file_server
}
CADDY
XDG_DATA_HOME=$work/xdg XDG_CONFIG_HOME=$work/xdg setsid caddy run --adapter caddyfile \
    --config Caddyfile > caddy.log 2>&1 & started

wait_for() {
    for _ in $(seq 200); do
        if [ "${1#/}" != "$1" ]; then
            python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$1" \
                2>/dev/null && return 0
        else
            python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])))' "$1" \
                2>/dev/null && return 0
        fi
        sleep 0.05
    done
    echo "nothing listens on $1; logs:" >&2
    tail -n 5 "$work"/*.log "$work"/*.out >&2 || true
    exit 1
}
for target in "$work/php-fpm.sock" "$auth" "$up" "$scb_port" "$nginx_port" "$caddy_port"; do
    wait_for "$target"
done

echo "scb: $("$bin" --version 2>&1 | head -1); $("$nginx" -v 2>&1); caddy $(caddy version | cut -d' ' -f1);" \
    "$("$fpm" -n -v | head -1 | cut -d' ' -f1-3)"
echo

python3 - "$auth_group" "$scb_port" "$nginx_port" "$caddy_port" <<'PY'
import hashlib, http.client, json, os, signal, sys, time

auth_group = int(sys.argv[1])
ports = {"scb": int(sys.argv[2]), "nginx": int(sys.argv[3]), "Caddy": int(sys.argv[4])}

def request(port, method, path, headers=(), body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"Host": "app.test", "Connection": "close"}
    h.update(headers)
    try:
        conn.request(method, path, body=body, headers=h)
        res = conn.getresponse()
        data = res.read()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, data
    except Exception as e:  # a reset or a timeout is an answer too
        return None, {}, str(e).encode()
    finally:
        conn.close()

def text(body, limit=44):
    t = body.decode("utf-8", "replace").strip().replace("\n", " ").replace("|", "\\|")
    return t if len(t) <= limit else t[:limit] + "..."

def show(fields=(), body=True):
    def cell(status, headers, data):
        if status is None:
            return "no answer: " + text(data)
        parts = [str(status)]
        parts += [f"{f}: {headers[f]}" if f in headers else f"no {f}" for f in fields]
        if body:
            parts.append(f'"{text(data)}"' if data else "empty")
        return "; ".join(parts)
    return cell

upload = bytes((i * 7 % 251) for i in range(10 * 1024 * 1024))
multipart = (b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
             b"Content-Type: application/octet-stream\r\n\r\n" + upload + b"\r\n--XyZ--\r\n")
digest = hashlib.sha256(upload).hexdigest()

def upload_cell(status, headers, data):
    if status is None:
        return "no answer: " + text(data)
    got = data.decode("utf-8", "replace").split()
    if len(got) == 4 and got[0] == "upload":
        return f"{status}; {got[2]} B, sha256 {'matches' if got[3] == digest else 'DIFFERS'}"
    return f'{status}; "{text(data)}"'

def env_cell(status, headers, data):
    try:
        env = json.loads(data)
    except ValueError:
        return f'{status}; "{text(data)}"'
    keys = ["SCRIPT_NAME", "PATH_INFO", "REQUEST_URI", "QUERY_STRING", "HTTP_PROXY"]
    return f"{status}; " + ", ".join(f"{k}={env.get(k)}" for k in keys)

form = b"name=Ann+Lee&lang=fr"
checks = [
    ("GET /", ("GET", "/", {}, None), show()),
    ("GET /users/7", ("GET", "/users/7", {}, None), show()),
    ("HEAD /users/7", ("HEAD", "/users/7", {}, None), show(["content-length"], body=False)),
    ("POST /form (urlencoded)", ("POST", "/form",
        {"Content-Type": "application/x-www-form-urlencoded"}, form), show()),
    ("POST /upload (10 MiB multipart)", ("POST", "/upload",
        {"Content-Type": "multipart/form-data; boundary=XyZ"}, multipart), upload_cell),
    ("GET /redirect", ("GET", "/redirect", {}, None), show(["location"], body=False)),
    ("GET /error (PHP fatal error)", ("GET", "/error", {}, None), show()),
    ("GET /env?x=1 with `Proxy:` (httpoxy)", ("GET", "/env?x=1",
        {"Proxy": "http://evil.test:8080"}, None), env_cell),
    ("GET /uploads/evil.jpg/x.php", ("GET", "/uploads/evil.jpg/x.php", {}, None), show()),
    ("GET /info.php/a/b (path info)", ("GET", "/info.php/a/b", {}, None), show()),
    ("GET /style.css", ("GET", "/style.css", {}, None), show(["content-type"], body=False)),
    ("GET /index.php (never its source)", ("GET", "/index.php", {}, None), show()),
    ("auth ok", ("GET", "/app/x", {"X-Test-Auth": "ok"}, None), show()),
    ("auth ok, client sends Remote-User: mallory", ("GET", "/app/x",
        {"X-Test-Auth": "ok", "Remote-User": "mallory"}, None), show()),
    ("auth ok without Remote-User, client sends mallory", ("GET", "/app/x",
        {"X-Test-Auth": "ok-anon", "Remote-User": "mallory"}, None), show()),
    ("auth ok, POST 100 KiB", ("POST", "/app/x", {"X-Test-Auth": "ok"}, b"x" * 102400), show()),
    ("auth answers 302 (login)", ("GET", "/app/x?y=1", {"X-Test-Auth": "login"}, None),
        show(["location"], body=False)),
    ("auth answers 401", ("GET", "/app/x", {}, None), show(["www-authenticate"], body=False)),
]
rows = {name: [] for name in ports}
for label, (method, path, headers, body), cell in checks:
    for name, port in ports.items():
        rows[name].append(cell(*request(port, method, path, headers, body)))

# Last: the auth service is gone.
os.killpg(auth_group, signal.SIGKILL)
time.sleep(0.2)
checks.append(("auth service down", None, None))
for name, port in ports.items():
    rows[name].append(show(body=False)(*request(port, "GET", "/app/x", {"X-Test-Auth": "ok"})))

print("| check | " + " | ".join(ports) + " |")
print("|---|" + "---|" * len(ports))
for i, (label, _, _) in enumerate(checks):
    print(f"| {label} | " + " | ".join(rows[n][i] for n in ports) + " |")
PY
