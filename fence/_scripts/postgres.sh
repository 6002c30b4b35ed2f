#!/usr/bin/env bash
# A private, throwaway PostgreSQL cluster for fence's tests and CI.
#
#   scripts/postgres.sh start          start one; prints its URL (postgresql://fence@127.0.0.1:PORT/fence)
#   scripts/postgres.sh stop [URL]     stop it and delete its directory
#   scripts/postgres.sh status [URL]   exit 0 if it runs, 3 if not
#   scripts/postgres.sh restart [URL]  stop it (fast: every connection is cut) and start it again
#   scripts/postgres.sh url            the URL of the cluster started last
#
# URL defaults to $FENCE_POSTGRES_URL. The cluster lives in
# ${TMPDIR:-/tmp}/fence-postgres-PORT, listens on 127.0.0.1 only, trusts local
# connections, and runs with fsync off: it is for tests, never for data. When
# run as root, initdb and the server run as the system user "fencepg" (created
# if missing; PostgreSQL refuses to run as root). If initdb is not installed,
# it is installed with apt-get.
set -euo pipefail

SERVER=postgres.sh
WHAT=cluster
URL_VARIABLE=FENCE_POSTGRES_URL
# shellcheck source=throwaway.sh
. "$(dirname "${BASH_SOURCE[0]}")/throwaway.sh"
RUN_AS=fencepg

find_bin() {
    local found
    # Resolve links: a linked initdb (/usr/local/bin) may have no createdb beside it.
    if found="$(command -v initdb 2>/dev/null)"; then dirname "$(readlink -f "$found")"; return; fi
    found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -n "$found" ] && [ -x "$found/initdb" ]; then echo "$found"; return; fi
    return 1
}

ensure_bin() {
    local bin
    if bin="$(find_bin)"; then echo "$bin"; return; fi
    [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed; install it (apt-get install postgresql) or run as root"
    apt_install postgresql
    find_bin || die "apt-get installed postgresql but no initdb was found under /usr/lib/postgresql"
}

as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u "$RUN_AS" -- "$@"; else "$@"; fi
}

start() {
    local bin port dir
    bin="$(ensure_bin)"
    if [ "$(id -u)" = 0 ] && ! id "$RUN_AS" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin "$RUN_AS"
    fi
    port="$(free_port)"
    dir="$(server_dir "$port")"
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown "$RUN_AS" "$dir"
    chmod 700 "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U fence --auth=trust --encoding=UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; rm -rf "$dir"; die "initdb failed (log above)"; }
    if ! as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        >/dev/null; then
        cat "$dir/server.log" >&2 || true
        rm -rf "$dir"
        die "the server did not start (log above)"
    fi
    if ! as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U fence fence; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
        rm -rf "$dir"
        die "createdb failed"
    fi
    started "postgresql://fence@127.0.0.1:$port/fence"
}

stop() {
    local bin port dir
    locate "${1:-}"
    must_have "$dir"
    bin="$(find_bin)" || die "PostgreSQL is not installed"
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}

status() {
    local bin port dir
    locate "${1:-}"
    bin="$(find_bin)" || exit 3
    [ -d "$dir/data" ] && as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 || exit 3
    echo "running: postgresql://fence@127.0.0.1:$port/fence ($dir)"
}

restart() {
    local bin port dir
    locate "${1:-}"
    must_have "$dir/data"
    bin="$(find_bin)" || die "PostgreSQL is not installed"
    # pg_ctl restart keeps the options the server was started with (postmaster.opts).
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart >/dev/null \
        || { tail -n 20 "$dir/server.log" >&2 || true; die "the server did not restart (log above)"; }
}

case "${1:-}" in
    start) start ;;
    stop) stop "${2:-}" ;;
    status) status "${2:-}" ;;
    restart) restart "${2:-}" ;;
    url) last_url ;;
    *) die "usage: scripts/postgres.sh start|stop [URL]|status [URL]|restart [URL]|url" ;;
esac
