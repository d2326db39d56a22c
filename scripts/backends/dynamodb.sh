# shellcheck shell=bash
# dynamodb: dynalite (npm, Apache-2.0), a DynamoDB-compatible HTTP server on
# LevelDB, standing in for DynamoDB as FerretDB does for MongoDB (AWS's
# DynamoDB Local may not be used: its licence).  Chosen over moto's server
# because dynalite applies each conditional write under a per-item lock,
# while moto checks, then writes, with no lock between concurrent requests
# (bakery-dynamodb's docs.md shows both).  scripts/dynalite/package.json
# and package-lock.json pin it; `npm ci` installs it once into the cache.
# --path keeps the tables on disk in the scratch directory, so a restart
# keeps them (LevelDB without a sync per write: a process crash loses
# nothing, a power loss may).  Tables leave CREATING after 50 ms (its
# default, 500, only slows the tests' table creations).
# (See lib.sh for the functions every server file defines.)

DYNALITE_SRC=$ROOT/scripts/dynalite

# shellcheck disable=SC2034  # describe (lib.sh) reads these
dynamodb_describe() {
    PIDFILE=$DIR/dynalite.pid
    COMM=node
    LOG=$DIR/dynalite.log
    PORTS=(BAKERY_DYNAMODB_PORT=18000)
    ALIASES=(dynalite)
}

dynalite_version() {
    sed -n 's/.*"dynalite": *"\([^"]*\)".*/\1/p' "$DYNALITE_SRC/package.json" | head -n 1
}

# What the install is made from: a change to either reinstalls it.
dynalite_inputs_hash() {
    cat "$DYNALITE_SRC/package.json" "$DYNALITE_SRC/package-lock.json" | sha256sum | cut -c1-16
}

dynalite_dir() { printf '%s/dynalite-%s\n' "$CACHE_DIR" "$(dynalite_version)"; }

dynamodb_missing() {
    have node || echo nodejs
    have npm || echo npm
}

dynamodb_install() {
    local dir hash tmp started=$SECONDS
    install_missing dynamodb
    dir=$(dynalite_dir)
    hash=$(dynalite_inputs_hash)
    if [[ -f $dir/node_modules/dynalite/cli.js && -f $dir.inputs && $(<"$dir.inputs") == "$hash" ]]; then
        return 0
    fi
    say "dynamodb: installing dynalite $(dynalite_version) into $dir (npm ci; once)"
    tmp=$dir.tmp.$$
    rm -rf "$tmp"
    mkdir -p "$tmp"
    cp "$DYNALITE_SRC/package.json" "$DYNALITE_SRC/package-lock.json" "$tmp/"
    # --ignore-scripts: classic-level (LevelDB) ships prebuilt binaries for
    # linux-x64, and its install script would only rebuild them with node-gyp.
    if ! (cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund) >&2; then
        rm -rf "$tmp"
        die "dynamodb: npm ci of dynalite failed (scripts/dynalite)"
    fi
    rm -rf "$dir"
    mv -T "$tmp" "$dir"
    echo "$hash" >"$dir.inputs"
    say "dynamodb: installed dynalite in $((SECONDS - started))s"
}

dynamodb_start() {
    mkdir -p "$DIR/data"
    launch_session node "$(dynalite_dir)/node_modules/dynalite/cli.js" --host 127.0.0.1 \
        --port "$(port_of dynamodb)" --path "$DIR/data" \
        --createTableMs 50 --deleteTableMs 50 --updateTableMs 50
}

# ListTables over bash's /dev/tcp (curl may be absent), unsigned: dynalite
# answers it with a 400 MissingAuthenticationToken, which shows that its
# HTTP server and request handling are up.
dynamodb_ready() {
    local reply
    # shellcheck disable=SC2016  # $0 expands in the inner shell
    reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" &&
        printf "POST / HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\n\r\n{}" >&3 && cat <&3' \
        "$(port_of dynamodb)" </dev/null 2>/dev/null) || return 1
    [[ $reply == "HTTP/1."* && $reply == *"__type"* ]]
}

dynamodb_after_start() { :; }

# The store URI with dummy keys: dynalite checks that a request is signed,
# not by whom.  Keys in the URI (not AWS_* variables in the environment)
# so that the test command's shell keeps the SDK's default chain for
# anything else, and every child process (CLI, serve) gets them with the
# URI.  The table is the default (bakery_rows) so tests can add `table=`.
dynamodb_uri() { echo "dynamodb://bakery:local@us-east-1?endpoint=http://127.0.0.1:$(port_of dynamodb)"; }

dynamodb_stop() { stop_pid dynamodb "$1"; }
