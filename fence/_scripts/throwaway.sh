# What postgres.sh and redis.sh share: a throwaway server of fence's, one directory a port.
#
# Sourced, not run. The script that sources it first sets
#   SERVER        its name in messages (postgres.sh, redis.sh)
#   URL_VARIABLE  the environment variable a URL defaults to (FENCE_POSTGRES_URL)
#   WHAT          what it starts, in messages (cluster, server)
# and gets:
#   BASE, LAST    where servers live, and the file that keeps the URL started last
#   die MESSAGE   the message on stderr, exit 2
#   port_of [URL] the port of URL (default: $URL_VARIABLE's value); dies if there is none
#   free_port     a port nothing listens on at 127.0.0.1 now
#   server_dir P  the directory of the server at port P
#   locate [URL]  set the caller's port and dir (declare them local) for URL, as port_of
#   must_have D   die unless the directory D (the server's, or one in it) is there
#   started URL   print URL and keep it for "url"
#   last_url      the URL started last; dies if none was
#   apt_install PACKAGE [OPTION...]  install PACKAGE with apt-get (the script checks for root first)

BASE="${TMPDIR:-/tmp}"
LAST="$BASE/fence-${SERVER%.sh}.last"

die() { echo "$SERVER: $*" >&2; exit 2; }

port_of() {
    local url="${1:-${!URL_VARIABLE:-}}"
    [ -n "$url" ] || die "no URL given and $URL_VARIABLE is not set"
    local port="${url##*:}"; port="${port%%/*}"
    [[ "$port" =~ ^[0-9]+$ ]] || die "cannot read a port in $url; pass the URL 'start' printed"
    echo "$port"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

server_dir() { echo "$BASE/fence-${SERVER%.sh}-$1"; }

locate() {
    port="$(port_of "${1:-}")"
    dir="$(server_dir "$port")"
}

must_have() { [ -d "$1" ] || die "no $WHAT of this script at port $port ($1 is missing)"; }

started() { echo "$1" | tee "$LAST"; }

last_url() {
    [ -s "$LAST" ] || die "nothing started yet: scripts/$SERVER start"
    cat "$LAST"
}

apt_install() {
    echo "$SERVER: installing $1 with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}
