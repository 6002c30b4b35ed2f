#!/usr/bin/env bash
# A private, throwaway Redis server for fence's celery target, its tests and CI.
#
#   scripts/redis.sh start          start one; prints its URL (redis://127.0.0.1:PORT/0)
#   scripts/redis.sh stop [URL]     stop it and delete its directory
#   scripts/redis.sh status [URL]   exit 0 if it runs, 3 if not
#   scripts/redis.sh url            the URL of the server started last
#
# URL defaults to $FENCE_REDIS_URL. The server lives in
# ${TMPDIR:-/tmp}/fence-redis-PORT, listens on 127.0.0.1 only, and keeps
# nothing on disk (no RDB snapshots, no append-only file): it is for tests,
# never for data. If redis-server is not installed and this runs as root, it is
# installed with apt-get. The same layout as scripts/postgres.sh, so that CI
# starts and stops both alike.
set -euo pipefail

SERVER=redis.sh
WHAT=server
URL_VARIABLE=FENCE_REDIS_URL
# shellcheck source=throwaway.sh
. "$(dirname "${BASH_SOURCE[0]}")/throwaway.sh"

ensure_bin() {
    local found
    if found="$(command -v redis-server 2>/dev/null)"; then echo "$found"; return; fi
    [ "$(id -u)" = 0 ] || die "redis-server is not installed; install it (apt-get install redis-server) or run as root"
    # --no-install-recommends: no service of the distribution's own is wanted, only the binary.
    apt_install redis-server --no-install-recommends
    command -v redis-server 2>/dev/null || die "apt-get installed redis-server but no redis-server is on PATH"
}

# PING over a plain socket: redis-cli is not needed, and nothing leaves 127.0.0.1.
answers() {
    python3 - "$1" <<'EOF' >/dev/null 2>&1
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as s:
    s.sendall(b"PING\r\n")
    sys.exit(0 if s.recv(16).startswith(b"+PONG") else 1)
EOF
}

alive() {  # the server whose pid file is in $1 still runs
    [ -s "$1/redis.pid" ] && kill -0 "$(cat "$1/redis.pid")" 2>/dev/null
}

start() {
    local bin port dir
    bin="$(ensure_bin)"
    port="$(free_port)"
    dir="$(server_dir "$port")"
    mkdir -p "$dir"
    chmod 700 "$dir"
    # save "" and appendonly no: nothing is ever written to disk, a stop loses everything.
    if ! "$bin" --bind 127.0.0.1 --port "$port" --protected-mode yes --dir "$dir" \
        --save "" --appendonly no --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/server.log" \
        >/dev/null 2>&1; then
        cat "$dir/server.log" >&2 2>/dev/null || true
        rm -rf "$dir"
        die "redis-server did not start (log above)"
    fi
    for _ in $(seq 1 100); do
        answers "$port" && break
        sleep 0.1
    done
    if ! answers "$port"; then
        alive "$dir" && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
        cat "$dir/server.log" >&2 2>/dev/null || true
        rm -rf "$dir"
        die "redis-server on port $port did not answer PING within 10 s (log above)"
    fi
    started "redis://127.0.0.1:$port/0"
}

stop() {
    local port dir pid
    locate "${1:-}"
    must_have "$dir"
    if alive "$dir"; then
        pid="$(cat "$dir/redis.pid")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}

status() {
    local port dir
    locate "${1:-}"
    alive "$dir" && answers "$port" || exit 3
    echo "running: redis://127.0.0.1:$port/0 ($dir)"
}

case "${1:-}" in
    start) start ;;
    stop) stop "${2:-}" ;;
    status) status "${2:-}" ;;
    url) last_url ;;
    *) die "usage: scripts/redis.sh start|stop [URL]|status [URL]|url" ;;
esac
