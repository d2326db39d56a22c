# shellcheck shell=bash
# mongodb: FerretDB v1 (the MongoDB wire protocol over PostgreSQL), since no
# registry reachable here ships a mongod.  A tiny Go main in scripts/ferretdb
# (go.mod/go.sum pin FerretDB; see main.go for why not `go install`) is built
# once into the cache and stores its data in database "ferretdb" of the
# postgres server, which `start mongodb` starts too.
# (See lib.sh for the functions every server file defines.)

FERRETDB_SRC=$ROOT/scripts/ferretdb

# shellcheck disable=SC2034  # describe (lib.sh) reads these
mongodb_describe() {
    PIDFILE=$DIR/ferretdb.pid
    COMM=ferretdb
    LOG=$DIR/ferretdb.log
    PORTS=(BAKERY_MONGODB_PORT=17017)
    REQUIRES=(postgres)
    ALIASES=(mongo ferretdb)
}

ferretdb_version() { go_mod_version "$FERRETDB_SRC/go.mod" github.com/FerretDB/FerretDB; }

ferretdb_bin() { printf '%s/ferretdb-%s/ferretdb\n' "$CACHE_DIR" "$(ferretdb_version)"; }

# What the binary is built from: a change to any of these rebuilds it.
ferretdb_inputs_hash() {
    cat "$FERRETDB_SRC/go.mod" "$FERRETDB_SRC/go.sum" "$FERRETDB_SRC"/*.go | sha256sum | cut -c1-16
}

# Go is not installed from apt: bookworm's 1.19 cannot build FerretDB 1.24 (go 1.24).
mongodb_missing() { postgres_missing; }

mongodb_install() {
    local version
    install_missing mongodb
    version=$(ferretdb_version)
    [[ -n $version ]] || die "mongodb: no github.com/FerretDB/FerretDB requirement in $FERRETDB_SRC/go.mod"
    # -tags ferretdb_no_sqlite: only the PostgreSQL handler is compiled in.
    go_build mongodb "FerretDB $version" "$(ferretdb_bin)" "$(ferretdb_inputs_hash)" "$FERRETDB_SRC" \
        "the first time, with nothing in Go's caches, takes a few minutes" \
        -tags ferretdb_no_sqlite .
}

mongodb_start() {
    pg_ensure_db ferretdb
    launch_session "$(ferretdb_bin)" -listen "127.0.0.1:$(port_of mongodb)" \
        -postgresql-url "postgres://postgres@127.0.0.1:$(port_of postgres)/ferretdb"
}

# OP_MSG {ping: 1, $db: "admin"} (\x24 is "$"); ready when the reply carries
# ok: 1.0 (double 0x3ff0000000000000).  FerretDB answers ping (and reads
# metadata it has cached) while its PostgreSQL is down, so that is probed too.
mongodb_ready() {
    local reply
    postgres_ready || return 1
    reply=$(wire_reply "$(port_of mongodb)" \
        '\x33\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\xdd\x07\x00\x00\x00\x00\x00\x00\x00\x1e\x00\x00\x00\x10ping\x00\x01\x00\x00\x00\x02\x24db\x00\x06\x00\x00\x00admin\x00\x00' \
        38)
    [[ $reply == *" 01 6f 6b 00 00 00 00 00 00 00 f0 3f"* ]]
}

mongodb_after_start() { :; }

# The plain URI, as a user would write it: the mongodb crate identifies
# FerretDB at connect and picks the insert strategy itself (FerretDB v1 does
# not apply findAndModify atomically; FerretDB issue 3040).
mongodb_uri() { echo "mongodb://127.0.0.1:$(port_of mongodb)/bakery"; }

mongodb_stop() { stop_pid mongodb "$1"; }
