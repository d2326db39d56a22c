#!/bin/sh
exec mariadb --no-defaults --protocol=TCP -h 127.0.0.1 -P 3306 -u bakery -pbakery \
    --connect-timeout=2 -e 'SELECT 1' bakery_src >/dev/null 2>&1
