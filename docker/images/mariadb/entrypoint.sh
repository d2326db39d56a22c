#!/bin/sh
# Creates the data directory on first start, then runs mariadbd in the
# foreground; --init-file makes database bakery_src and user bakery at every
# start (idempotent) before clients are accepted.
set -eu
data=/var/lib/mysql
if [ ! -f "$data/bakery-initialized" ]; then
    mariadb-install-db --no-defaults --datadir="$data" --user=mysql \
        --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve >/dev/null
    touch "$data/bakery-initialized"
fi
cat >/run/bakery-init.sql <<'SQL'
CREATE DATABASE IF NOT EXISTS bakery_src;
CREATE USER IF NOT EXISTS 'bakery'@'%' IDENTIFIED BY 'bakery';
GRANT ALL PRIVILEGES ON *.* TO 'bakery'@'%' WITH GRANT OPTION;
SQL
install -d -o mysql -g mysql /run/mysqld
chown -R mysql:mysql "$data"
exec mariadbd --no-defaults --user=mysql --datadir="$data" --port=3306 --bind-address=0.0.0.0 \
    --skip-name-resolve --socket=/run/mysqld/mysqld.sock --skip-log-bin \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci --max-connections=200 \
    --innodb-flush-log-at-trx-commit=1 --innodb-doublewrite=1 --init-file=/run/bakery-init.sql "$@"
