# shellcheck shell=bash
# mariadb: MariaDB (10.11 on Debian 12) from Debian's mariadb-server package,
# mariadbd run directly -- no systemd, no mariadbd-safe, no /etc/mysql option
# files (--no-defaults) -- with its data, socket, pid file and log in its
# scratch directory, listening on 127.0.0.1 only, binary log off.
# BAKERY_MARIADB_URI names database bakery_src as user bakery (password
# bakery), which has ALL PRIVILEGES on *.*; root has no password and is only
# for this script and the tests that change server settings.  The URI is
# both bakery migrate's MariaDB source and a store URI of the mysql backend
# (crates/bakery-mysql, its table bakery_rows in the same database).
# (See lib.sh for the functions every server file defines.)

# shellcheck disable=SC2034  # describe (lib.sh) reads these
mariadb_describe() {
    # Written by launch_session, not by mariadbd (its own --pid-file is
    # mariadbd.pid): mariadbd deletes its pid file when it aborts during
    # start-up, and then lib.sh could not tell "exited" from "still starting".
    PIDFILE=$DIR/mariadb.pid
    COMM=mariadbd
    LOG=$DIR/mariadb.log
    PORTS=(BAKERY_MARIADB_PORT=13306)
    ALIASES=(mysql)
}

# mariadbd lives in /usr/sbin, which a non-root PATH may lack.
mariadb_server_bin() {
    if have mariadbd; then
        command -v mariadbd
    elif [[ -x /usr/sbin/mariadbd ]]; then
        echo /usr/sbin/mariadbd
    else
        return 1
    fi
}

mariadb_missing() {
    if ! mariadb_server_bin >/dev/null || ! have mariadb-install-db; then echo mariadb-server; fi
    if ! have mariadb || ! have mariadb-admin; then echo mariadb-client; fi
}

mariadb_install() { install_missing mariadb; }

# mariadb_socket: the server's Unix socket, next to its data unless that path
# is too long for a socket (108 bytes with the NUL).
mariadb_socket() {
    local sock
    sock=$(dir_of mariadb)/mariadb.sock
    ((${#sock} <= 100)) || sock=/tmp/bakery-mariadb-$(port_of mariadb).sock
    echo "$sock"
}

# mariadb_sql SQL: runs SQL as root over TCP (root@127.0.0.1 has no password).
mariadb_sql() {
    mariadb --no-defaults --protocol=TCP -h 127.0.0.1 -P "$(port_of mariadb)" -u root \
        --connect-timeout=5 --batch --skip-column-names -e "$1" </dev/null
}

# As root, mariadbd runs as root too (--user=root): it refuses root without
# that option, but with it it runs fine, and unlike switching to user mysql
# (as postgres.sh does for PostgreSQL, which refuses root outright) it needs
# no chown and works wherever the scratch directory is, even below a
# directory that user mysql cannot enter (/root).  Only tests reach it, on
# 127.0.0.1.
mariadb_user_args() {
    if [[ $EUID -eq 0 ]]; then echo --user=root; fi
}

mariadb_start() {
    local data=$DIR/data port server sock user_args=()
    port=$(port_of mariadb)
    server=$(mariadb_server_bin) || die "mariadb: mariadbd not found (package mariadb-server)"
    sock=$(mariadb_socket)
    mapfile -t user_args < <(mariadb_user_args)
    if [[ ! -f $data/bakery-initialized ]]; then
        say "mariadb: mariadb-install-db $data"
        rm -rf "$data" # a half-made data directory from an interrupted install
        LOG=$DIR/install-db.log
        # normal: root@localhost and root@127.0.0.1 without a password (the
        # default, socket, would tie root to the Unix user running this script).
        (cd / && mariadb-install-db --no-defaults --datadir="$data" "${user_args[@]}" \
            --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve) \
            </dev/null >"$LOG" 2>&1 || return 1
        LOG=$DIR/mariadb.log
        touch "$data/bakery-initialized"
    fi
    # mariadbd stays in the foreground; launch_session daemonizes it.  No
    # --log-bin: the binary log stays off, so creating triggers needs no
    # SUPER (nor log_bin_trust_function_creators).
    launch_session -C "$DIR" "$server" --no-defaults "${user_args[@]}" \
        --datadir="$data" --port="$port" --bind-address=127.0.0.1 --skip-name-resolve \
        --socket="$sock" --pid-file="$DIR/mariadbd.pid" --log-error="$LOG" \
        --skip-log-bin --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        --max-connections=200
}

# mariadb-admin ping succeeds once the server accepts connections.
mariadb_ready() {
    timeout 5 mariadb-admin --no-defaults --protocol=TCP -h 127.0.0.1 -P "$(port_of mariadb)" \
        -u root --connect-timeout=2 ping </dev/null >/dev/null 2>&1
}

mariadb_after_start() {
    mariadb_sql "CREATE DATABASE IF NOT EXISTS bakery_src;
        CREATE USER IF NOT EXISTS 'bakery'@'127.0.0.1' IDENTIFIED BY 'bakery';
        GRANT ALL PRIVILEGES ON *.* TO 'bakery'@'127.0.0.1' WITH GRANT OPTION;" ||
        fail mariadb "cannot create database bakery_src and user bakery on 127.0.0.1:$(port_of mariadb)"
}

mariadb_uri() { echo "mysql://bakery:bakery@127.0.0.1:$(port_of mariadb)/bakery_src"; }

# SIGTERM is mariadbd's normal shutdown (as mariadb-admin shutdown), and needs
# no login.
mariadb_stop() { stop_pid mariadb "$1"; }
