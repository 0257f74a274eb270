"""A torchrun entry point for the restart test (tests/test_backends_torchrun.py); it imports
nothing heavy, so a life of a worker takes milliseconds.

First life of each node's worker: wait until every node's worker has started; then the worker
of node $PARC_FAIL_NODE fails, and the other one sleeps, as a rank blocked in a collective on
its dead peer would. Second life: wait until every node's worker lives its second life too,
then append rank and world size to the file given as the first argument. The folder given as
the second argument holds one marker per node and life ($PARC_TEST_NODE names the node)."""
import json
import os
import sys
import time

report, marks = sys.argv[1], sys.argv[2]
node = os.environ["PARC_TEST_NODE"]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def barrier(life: int) -> None:
    open(os.path.join(marks, f"life{life}-node{node}"), "w").close()
    deadline = time.monotonic() + 60
    while sum(n.startswith(f"life{life}-") for n in os.listdir(marks)) < world:
        if time.monotonic() > deadline:
            sys.exit(f"rank {rank}: the world never met in life {life}")
        time.sleep(0.05)


life = 2 if os.path.exists(os.path.join(marks, f"life1-node{node}")) else 1
barrier(life)
if life == 1:
    if node == os.environ["PARC_FAIL_NODE"]:
        os._exit(3)
    time.sleep(600)
    os._exit(4)
with open(report, "a", encoding="utf-8") as f:
    f.write(json.dumps({"node": node, "rank": rank, "world": world}) + "\n")
