# shellcheck shell=bash
# toxiproxy: Shopify's TCP fault proxy, which tests/proxy_faults.rs puts
# between the test clients and each server to delay, cut, reset and
# blackhole their connections (bakery_testkit::proxy is its client).  It is
# toxiproxy-server from the Go module proxy, pinned by scripts/toxiproxy/go.mod
# and go.sum (a `tool` directive; no source of ours), built once into the cache
# like FerretDB.  Only its HTTP API listens at start; each test creates the
# proxies it needs (on ports the kernel picks) and deletes them, so it needs
# no other server running and fronts whichever the tests name.  Its variable
# is BAKERY_TOXIPROXY_URL (an HTTP API, not a store URI).
# (See lib.sh for the functions every server file defines.)

TOXIPROXY_SRC=$ROOT/scripts/toxiproxy
TOXIPROXY_MODULE=github.com/Shopify/toxiproxy/v2

# shellcheck disable=SC2034  # describe (lib.sh) reads these
toxiproxy_describe() {
    PIDFILE=$DIR/toxiproxy.pid
    # The binary is named so that its command name is not cut to 15 characters.
    COMM=toxiproxy
    LOG=$DIR/toxiproxy.log
    PORTS=(BAKERY_TOXIPROXY_PORT=18474)
}

toxiproxy_version() { go_mod_version "$TOXIPROXY_SRC/go.mod" "$TOXIPROXY_MODULE"; }

toxiproxy_bin() { printf '%s/toxiproxy-%s/toxiproxy\n' "$CACHE_DIR" "$(toxiproxy_version)"; }

# What the binary is built from: a change to either rebuilds it.
toxiproxy_inputs_hash() {
    cat "$TOXIPROXY_SRC/go.mod" "$TOXIPROXY_SRC/go.sum" | sha256sum | cut -c1-16
}

# Go is not installed from apt (bookworm's 1.19 is too old; see mongodb.sh).
toxiproxy_missing() { :; }

toxiproxy_install() {
    local version
    version=$(toxiproxy_version)
    [[ -n $version ]] || die "toxiproxy: no $TOXIPROXY_MODULE requirement in $TOXIPROXY_SRC/go.mod"
    # The module's own server command, at the versions go.sum pins; -X stamps
    # the version GET /version reports (else "git").
    go_build toxiproxy "Toxiproxy $version" "$(toxiproxy_bin)" "$(toxiproxy_inputs_hash)" "$TOXIPROXY_SRC" \
        "about a minute the first time" \
        -ldflags "-X $TOXIPROXY_MODULE.Version=$version" "$TOXIPROXY_MODULE/cmd/server"
}

toxiproxy_start() {
    mkdir -p "$DIR"
    # LOG_LEVEL=info: its default, debug, logs every API request.
    launch_session env LOG_LEVEL=info "$(toxiproxy_bin)" -host 127.0.0.1 -port "$(port_of toxiproxy)"
}

# GET /version over bash's /dev/tcp (curl may be absent): HTTP/1.0, so the
# server closes after its reply; ready on a 200 with {"version": "…"}.
toxiproxy_ready() {
    local reply
    # shellcheck disable=SC2016  # $0 expands in the inner shell
    reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" &&
        printf "GET /version HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3 && cat <&3' \
        "$(port_of toxiproxy)" </dev/null 2>/dev/null) || return 1
    [[ $reply == "HTTP/1."?" 200 "* && $reply == *'"version"'* ]]
}

toxiproxy_after_start() { :; }

toxiproxy_env_var() { echo BAKERY_TOXIPROXY_URL; }

toxiproxy_uri() { echo "http://127.0.0.1:$(port_of toxiproxy)"; }

toxiproxy_stop() { stop_pid toxiproxy "$1"; }
