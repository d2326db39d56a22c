"""Draw N ids from one Sequence and write them, one a line, to a file."""

import sys

from barrier import wait_for_go

import bakery

url, name, count, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
wait_for_go()
with bakery.Client(url) as client:
    seq = client.sequence(name, block=50)
    ids = [seq.next() for _ in range(count)]
with open(out, "w") as f:
    f.write("\n".join(map(str, ids)) + "\n")
