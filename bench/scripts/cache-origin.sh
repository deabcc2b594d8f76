# Sourced by cache-hit-callgrind.sh and pgo-train.sh: the origin both load, the routes both
# give scb in front of it, and the wrk script that makes every request a miss.

# Writes WORK/nginx.conf: nginx on 127.0.0.1:PORT answering every path with the same 13
# bytes, cacheable for a day.
write_origin_conf() {
    local work=$1 port=$2
    cat > "$work/nginx.conf" <<NGINX
daemon off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/b; proxy_temp_path $work/p; fastcgi_temp_path $work/f;
    uwsgi_temp_path $work/u; scgi_temp_path $work/s;
    server {
        listen 127.0.0.1:$port;
        location / {
            default_type text/plain;
            add_header Cache-Control "max-age=86400";
            return 200 "hello, world\n";
        }
    }
}
NGINX
}

# Prints scb's routes: /respond, /static/ from WORK/www, /proxy/ to the origin on PORT, and
# everything else through a memory cache of MAX_BYTES in front of it.
cache_routes() {
    local work=$1 port=$2 max_bytes=$3
    cat <<TOML
[[route]]
path = "/respond"
respond = { body = "hello, world\n" }
[[route]]
prefix = "/static/"
static = { root = "$work/www" }
[[route]]
prefix = "/proxy/"
proxy = { upstreams = ["127.0.0.1:$port"] }
[[route]]
prefix = "/"
proxy = { upstreams = ["127.0.0.1:$port"] }
cache = { max_bytes = "$max_bytes" }
TOML
}

# Writes WORK/unique.lua: a new URL for every request, each one a miss that is stored.
write_unique_lua() {
    cat > "$1/unique.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/miss/" .. n)
end
LUA
}
