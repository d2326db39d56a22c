#!/bin/bash
# OP_MSG {ping: 1, $db: "admin"} (\x24 is "$"); healthy when the reply
# carries ok: 1.0 (a double, 00 00 00 00 00 00 f0 3f) and PostgreSQL answers
# too (FerretDB answers ping from its cache while PostgreSQL is down).
psql -h 127.0.0.1 -U postgres -d ferretdb -Atqc 'SELECT 1' >/dev/null 2>&1 || exit 1
reply=$(timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/27017 &&
    printf "\x33\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\xdd\x07\x00\x00\x00\x00\x00\x00\x00\x1e\x00\x00\x00\x10ping\x00\x01\x00\x00\x00\x02\x24db\x00\x06\x00\x00\x00admin\x00\x00" >&3 &&
    head -c 38 <&3' 2>/dev/null | od -An -v -tx1 | tr -s ' \n' '  ')
[[ $reply == *" 01 6f 6b 00 00 00 00 00 00 00 f0 3f"* ]]
