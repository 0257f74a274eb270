"""The planner's memory is bounded: the largest cluster the schema allows (2**17 nodes × 16 GPUs,
2**21 GPUs) is searched in a bounded peak RSS (it grew to 7 GB when every mesh shape's rank map,
with its world-size group arrays, was kept for the whole search)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEAK_RSS_LIMIT_MIB = 1536  # the documented bound (docs/language.md, "Limits")

CLUSTER = """cluster "largest" {
  nodes         = 131072
  gpus_per_node = 16
  gpu           = h100_sxm
}
"""

# runs the search in the child and reports the child's own peak RSS (KiB on Linux)
PROBE = """
import json, resource, sys
from parc.cli.main import main
rc = main(["plan", "--model", "llama3_70b", "--cluster", sys.argv[1], "--top", "3", "--format", "json"])
sys.stderr.write("PEAK_RSS_KIB %d\\n" % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
sys.exit(rc)
"""


def test_the_largest_cluster_is_searched_in_bounded_memory(tmp_path):
    spec = tmp_path / "largest.par"
    spec.write_text(CLUSTER, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", PROBE, str(spec)], capture_output=True, text=True, env=env,
                       timeout=580)
    assert r.returncode == 0, r.stderr[-2000:]
    peak_kib = int(r.stderr.rsplit("PEAK_RSS_KIB", 1)[1].split()[0])
    peak_mib = peak_kib / 1024 if sys.platform != "darwin" else peak_kib / (1024 * 1024)
    assert peak_mib < PEAK_RSS_LIMIT_MIB, f"peak RSS {peak_mib:.0f} MiB"
    rep = json.loads(r.stdout)
    assert rep["world_size"] == 131072 * 16 and rep["valid"] > 0 and rep["plans"]
    mesh = rep["plans"][0]["mesh"]
    assert mesh["pp"] * mesh["dp"] * mesh["cp"] * mesh["tp"] == 131072 * 16


def test_joint_groups_cross_nodes_exactly_when_one_of_their_axes_does():
    """The search judges the (dp, cp) gradient group from its axes, without the rank arrays; it
    must agree with the rank map's own answer on every shape of a small cluster."""
    import itertools
    from dataclasses import replace

    from parc.model.rankmap import RankMap
    from parc.planner.inputs import problem
    from parc.planner.space import crosses

    pr = problem("llama3_8b", str(ROOT / "examples" / "clusters" / "dgx-h100-8node.par"))
    checked = 0
    for pp, cp, tp in itertools.product((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)):
        if 64 % (pp * cp * tp):
            continue
        dp2 = 64 // (pp * cp * tp)
        for order in (("pp", "dp", "cp", "tp"), ("dp", "pp", "tp", "cp"), ("cp", "tp", "pp", "dp")):
            q = replace(pr, order=list(order), memo={})
            rm = RankMap.from_sizes(8, order=order, pp=pp, dp=dp2, cp=cp, tp=tp)
            mesh = (pp, dp2, cp, tp, 1, 1)
            for axis in (("dp", "cp"), ("pp", "tp"), ("dp", "cp", "tp")):
                assert crosses(q, mesh, axis) == rm.crosses_node(axis), (order, mesh, axis)
                checked += 1
    assert checked > 100
