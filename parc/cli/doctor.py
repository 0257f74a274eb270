"""parc doctor: the pre-flight check of a node against a spec, before the launch."""
from __future__ import annotations

import json
import os
import sys

DESCRIPTION = """Check this node against the plan before the launch: the GPUs (count, model, free memory)
against the cluster block; the driver, torch and the engines the spec's targets start against the
releases it pins; the network interfaces NCCL and Gloo will use, the InfiniBand/RoCE ports and
NCCL_IB_DISABLE; what a DeepEP all-to-all or an EFA cluster needs (IBGDA, GPUDirect RDMA, NVSHMEM,
libfabric); node 0's address, what its name resolves to and its rendezvous port; NIXL between the
pools of a disaggregated plan (PARC_HOSTS lists the nodes); the launch folder on a shared
filesystem; /dev/shm and the locked-memory limit. Run it on every node of a job, with that node's
rank.

Each finding has a code (D1xx, docs/doctor.md), the fix, and the numbers in the JSON form."""
EPILOG = """exit status: 0 ready (warnings may remain), 1 problems to fix, 2 usage or I/O failure
(a spec that does not resolve)

examples:
  parc doctor examples/llama3-70b-serve.par
  parc doctor spec.par --node-rank 1 --master-addr 10.0.0.1
  parc doctor spec.par --json > doctor-node0.json
  parc doctor launch/plan.json --node-rank 1      # a node that has only the compiled folder"""


def add_arguments(p):
    p.add_argument("spec", metavar="SPEC", help="the .par file the node will launch, or the plan.json "
                   "its compiled launch folder holds")
    p.add_argument("--node-rank", type=int, metavar="N", default=None,
                   help="this node's rank (default: NODE_RANK, else SLURM_NODEID, else 0); node 0 hosts "
                        "the rendezvous, the others connect to it")
    p.add_argument("--master-addr", metavar="A", help="node 0's address (default: MASTER_ADDR, else the host "
                   "of rdzv_endpoint)")
    p.add_argument("--port", type=int, metavar="P", help="the rendezvous port (default: MASTER_PORT, else the "
                   "port the spec's launch uses)")
    p.add_argument("--launch-dir", metavar="DIR", default=".",
                   help="the folder the launch runs from, which several nodes must share (default: .)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="output format: text (default) or json (docs/doctor.md gives its shape)")
    p.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in "
                   "(default: the git checkout holding the spec, else its folder)")


def _node_rank(args) -> int | None:
    if args.node_rank is not None:
        return args.node_rank
    for var in ("NODE_RANK", "SLURM_NODEID"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    return 0


def _compiled(path: str):
    """The plan of a compiled ``plan.json`` (what every launch folder holds beside its scripts)."""
    from parc.model.plan import plan_from_dict

    with open(path, encoding="utf-8") as f:
        return plan_from_dict(json.load(f))


def _load(args):
    """(plan, errors in the spec, the name messages give it), or an exit status after saying why."""
    from parc.cli.common import load_spec, read_error, unread
    from parc.report.diagnostics.text import write

    if args.spec.endswith(".json"):
        try:
            return _compiled(args.spec), 0, args.spec
        except OSError as e:
            print(read_error(args.spec, e), file=sys.stderr)
        except ValueError as e:   # not JSON, or not a plan (pydantic's ValidationError is a ValueError)
            print(f"parc doctor: {args.spec} is not a compiled plan.json: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    try:
        r = load_spec(args.spec, root=args.root)
    except OSError as e:
        print(read_error(args.spec, e), file=sys.stderr)
        return 2
    if (code := unread(r)) is not None:
        return code
    if r.plan is None:
        write(r.diagnostics, r.sources, sys.stderr)
        print(f"parc doctor: {args.spec} does not resolve to a plan: nothing to check the node against",
              file=sys.stderr)
        return 2
    return r.plan, len(r.errors), r.file if args.spec == "-" else args.spec


def run(args) -> int:
    from parc.doctor import diagnose
    from parc.doctor.context import Context
    from parc.doctor.probes import real

    loaded = _load(args)
    if isinstance(loaded, int):
        return loaded
    plan, errors, name = loaded
    rank = _node_rank(args)
    if not 0 <= rank < plan.cluster.nodes:
        print(f"parc doctor: error: node rank {rank} is outside the cluster's {plan.cluster.nodes} node(s) "
              f"(0 to {plan.cluster.nodes - 1})", file=sys.stderr)
        return 2
    ctx = Context(plan, real(), node_rank=rank, master_addr=args.master_addr, port=args.port,
                  launch_dir=args.launch_dir, spec=name)
    rep = diagnose(ctx, spec_errors=errors)
    if args.format == "json":
        print(json.dumps(rep.to_json(), indent=2))
    else:
        from parc.doctor.render import text

        from parc.report.term import use_color

        sys.stdout.write(text(rep, color=use_color(sys.stdout)))
    return 0 if rep.ready else 1
