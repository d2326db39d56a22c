# shellcheck shell=bash
# postgres: PostgreSQL from Debian's postgresql package (the newest installed
# major version, or the one that created the existing cluster), started with
# pg_ctl -- as user postgres when we are root -- with logical WAL and
# synchronous_commit on.  BAKERY_POSTGRES_URI names database "bakery".
# ssl=on, with the certificate of the test CA (lib.sh: ensure_test_ca) for
# DNS:localhost: BAKERY_POSTGRES_TLS_URI is the same server by that name and
# BAKERY_POSTGRES_TLS_CA the CA to trust (crates/bakery-postgres/tests/tls.rs).
# A client's sslmode decides: the default prefer encrypts, disable does not.
# (See lib.sh for the functions every server file defines.)

# shellcheck disable=SC2034  # describe (lib.sh) reads these
postgres_describe() {
    PIDFILE=$DIR/data/postmaster.pid
    COMM=postgres
    LOG=$DIR/postgres.log
    PORTS=(BAKERY_PG_PORT=15432)
    ALIASES=(postgresql pg)
}

# pg_bin: the PostgreSQL bin directory (BAKERY_PG_BIN, else the version of the
# existing cluster, else the newest installed).
pg_bin() {
    local data version found=()
    if [[ -n ${BAKERY_PG_BIN:-} ]]; then
        echo "$BAKERY_PG_BIN"
        return
    fi
    data=$(dir_of postgres)/data
    if [[ -f $data/PG_VERSION ]]; then # an existing cluster needs its own major version
        version=$(<"$data/PG_VERSION")
        [[ -x /usr/lib/postgresql/$version/bin/postgres ]] || return 1
        echo "/usr/lib/postgresql/$version/bin"
        return
    fi
    shopt -s nullglob
    found=(/usr/lib/postgresql/*/bin/initdb)
    shopt -u nullglob
    ((${#found[@]})) || return 1
    printf '%s\n' "${found[@]%/initdb}" | sort -V | tail -n 1
}

# Runs a PostgreSQL program as the cluster owner: initdb and postgres refuse root.
pg_run() {
    if [[ $EUID -eq 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

postgres_missing() {
    local data
    tls_missing
    pg_bin >/dev/null && return
    data=$(dir_of postgres)/data
    if [[ -f $data/PG_VERSION ]]; then
        die "postgres: $data was created by PostgreSQL $(<"$data/PG_VERSION"), which is not installed; remove $(dir_of postgres) or install that version"
    fi
    echo postgresql
}

postgres_install() { install_missing postgres; }

postgres_start() {
    local data=$DIR/data bin sock port
    port=$(port_of postgres)
    bin=$(pg_bin)
    if [[ $EUID -eq 0 ]]; then
        id -u postgres >/dev/null 2>&1 || die "postgres: no user 'postgres' (the postgresql package creates it)"
        chown postgres: "$DIR"
        pg_run test -w "$DIR" ||
            die "postgres: user postgres cannot write $DIR (a parent directory is closed to it); set BAKERY_SCRATCH to a directory under /tmp"
    fi
    if [[ ! -f $data/PG_VERSION ]]; then
        say "postgres: initdb $data ($bin)"
        rm -rf "$data" # a half-made cluster from an interrupted initdb
        LOG=$DIR/initdb.log
        pg_run "$bin/initdb" -D "$data" -A trust -U postgres -E UTF8 --no-locale >"$LOG" 2>&1 || return 1
        LOG=$DIR/postgres.log
    fi
    # The Unix socket lives next to the data unless that path is too long for a socket.
    sock=$DIR
    ((${#sock} <= 90)) || sock=/tmp
    # After a SIGKILL the socket's lock file names a dead postmaster; PostgreSQL
    # refuses to start while that pid exists even as an unreaped zombie.
    local lock_file=$sock/.s.PGSQL.$port.lock lock_pid=''
    if [[ -f $lock_file ]]; then
        { read -r lock_pid <"$lock_file"; } 2>/dev/null || true
        if ! alive "$lock_pid" postgres; then
            say "postgres: removing stale socket lock $lock_file"
            rm -f "$lock_file" "$sock/.s.PGSQL.$port"
        fi
    fi
    # PostgreSQL refuses a key file that others can read or that is not its
    # own: a copy, owned by the cluster's user, mode 0600.
    ensure_test_ca
    install -m 600 "$TLS_DIR/server.key" "$DIR/server.key"
    install -m 644 "$TLS_DIR/server.pem" "$DIR/server.pem"
    if [[ $EUID -eq 0 ]]; then chown postgres: "$DIR/server.key" "$DIR/server.pem"; fi
    local tls="-c ssl=on -c ssl_cert_file='$DIR/server.pem' -c ssl_key_file='$DIR/server.key'"
    # pg_ctl daemonizes the server (its log: -l) and waits for it; pg_ctl's own
    # messages go to our stderr.
    (
        close_fds
        pg_run "$bin/pg_ctl" -D "$data" -l "$LOG" -w -t "$TIMEOUT" \
            -o "-p $port -k '$sock' -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_connections=200 -c synchronous_commit=on $tls" \
            start
    ) </dev/null
}

postgres_ready() {
    local bin
    bin=$(pg_bin) || return 1
    "$bin/pg_isready" -q -t 2 -h 127.0.0.1 -p "$(port_of postgres)" -U postgres -d postgres </dev/null
}

# pg_ensure_db DB: creates database DB (a plain name) in the running server if absent.
pg_ensure_db() {
    local db=$1 bin port found
    bin=$(pg_bin)
    port=$(port_of postgres)
    found=$("$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$db'" </dev/null) ||
        fail postgres "cannot query pg_database on 127.0.0.1:$port"
    if [[ $found != 1 ]]; then
        say "postgres: createdb $db"
        "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres "$db" </dev/null ||
            fail postgres "createdb $db failed"
    fi
}

# The database, and TLS checked the way the tests check it (verify-full
# against the test CA): a server started before ssl=on was added has none.
postgres_after_start() {
    local port
    pg_ensure_db bakery
    port=$(port_of postgres)
    tls_answers postgres "$port" on ssl=on "$(pg_bin)/psql" -X -q -tA \
        "host=localhost port=$port user=postgres dbname=bakery sslmode=verify-full sslrootcert='$TLS_DIR/ca.pem'" \
        -c 'SHOW ssl'
}

postgres_uri() { echo "postgres://postgres@127.0.0.1:$(port_of postgres)/bakery"; }

postgres_more_env() {
    echo "BAKERY_POSTGRES_TLS_URI postgres://postgres@localhost:$(port_of postgres)/bakery"
    echo "BAKERY_POSTGRES_TLS_CA $TLS_DIR/ca.pem"
}

postgres_stop() {
    pg_run "$(pg_bin)/pg_ctl" -D "$DIR/data" -m fast -w -t "$TIMEOUT" stop </dev/null
}
