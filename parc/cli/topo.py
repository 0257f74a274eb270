"""parc topo: a node's topology written as a `cluster` block."""
from __future__ import annotations

import sys

DESCRIPTION = ("Read a node's topology -- `nvidia-smi topo -m` or, with --rocm, `rocm-smi --showtopo` -- "
               "and write it as a `cluster` block: NVLink islands, each GPU's NUMA node, the link "
               "matrix where those do not say enough, the NIC nearest each GPU.")
EPILOG = """With no FILE, parc runs the tool on this machine (and names the GPU preset from
`nvidia-smi --query-gpu=name`). FILE `-` reads standard input.

exit status: 0 written, 1 the text is not the tool's output, 2 usage or I/O failure

examples:
  parc topo -o cluster.par --nodes 4
  nvidia-smi topo -m | parc topo - --gpu h100_sxm
  parc topo --rocm rocm-topo.txt --nics nics.txt --gpu mi300x"""


def add_arguments(p):
    p.add_argument("file", nargs="?", metavar="FILE", help="the tool's saved output (`-`: standard input)")
    p.add_argument("--rocm", action="store_true", help="read `rocm-smi --showtopo` (AMD GPUs)")
    p.add_argument("--nics", metavar="FILE", help="NICs and their NUMA node, one `name node` a line "
                   "(for rocm-smi, which lists no NICs)")
    p.add_argument("--gpu", metavar="PRESET", help="the GPU preset to write (`parc presets` lists them)")
    p.add_argument("--name", default="node", help="the cluster's name (default: node)")
    p.add_argument("--nodes", type=int, default=1, metavar="N", help="nodes like this one (default: 1)")
    p.add_argument("-o", "--output", metavar="OUT", help="write the block to OUT (atomically) instead of stdout")


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def run(args) -> int:
    from parc.resolve.catalog import presets
    from parc.resolve.evaluate import did_you_mean
    from parc.topo import TopoError, cluster_block, read_nics, read_nvidia, read_rocm
    from parc.topo.probe import TOPO, gpu_preset, run_tool

    if args.gpu and args.gpu not in presets("gpus"):
        sug = did_you_mean(args.gpu, presets("gpus"))
        print(f"parc: unknown GPU preset `{args.gpu}`" + (f"; did you mean `{sug}`?" if sug else "") +
              " (`parc presets` lists them)", file=sys.stderr)
        return 2
    if args.nodes < 1:
        print("parc: --nodes must be at least 1", file=sys.stderr)
        return 2
    gpu = args.gpu
    try:
        text = _read(args.file) if args.file else run_tool(TOPO[args.rocm])
        nics = _read(args.nics) if args.nics else None
    except OSError as e:
        print(f"parc: cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    except TopoError as e:
        print(f"parc: {e}", file=sys.stderr)
        return 2
    try:
        reading = read_rocm(text) if args.rocm else read_nvidia(text)
        if nics is not None:
            reading = read_nics(nics, reading)
    except TopoError as e:
        print(f"parc: {args.file or TOPO[args.rocm][0]}: {e}", file=sys.stderr)
        return 1
    if gpu is None and not args.file:
        gpu = gpu_preset(args.rocm)
    block = cluster_block(reading, args.name, gpu, args.nodes)
    if args.output:
        from parc.cli.output import write_output

        return write_output(args.output, block)
    sys.stdout.write(block)
    return 0
