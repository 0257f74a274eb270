"""parc draw: the rank map, the pipeline schedule or per-GPU memory as an SVG (or PNG) picture."""
from __future__ import annotations

import os
import sys

from parc.words import count

DESCRIPTION = """Draw a plan: `mesh` (nodes, their GPUs coloured by tensor-parallel group and labelled
with (pp, dp, cp, tp), and what crosses between nodes), `schedule` (each pipeline rank's F, B
and W blocks over time, idle time hatched), `memory` (stacked bars per pipeline stage
against the GPU's capacity) or, for a serving plan, `timeline` (each pipeline rank's prefill and
decode steps at the workload, as long as the cost model estimates them). SVG is written by parc itself, with nothing else installed. PNG
needs the `png` extra, `pip install "parc[png]"`: cairosvg, which draws with the system's cairo
library (libcairo2 on Debian and Ubuntu, cairo on Homebrew)."""
EPILOG = """examples:
  parc draw examples/llama3-70b-train.par --what mesh -o mesh.svg
  parc draw examples/llama3-70b-train.par --what schedule -o schedule.png
  parc draw examples/llama3-70b-serve.par --what timeline -o timeline.svg"""

WHAT = ("mesh", "schedule", "memory", "timeline")


def add_arguments(p):
    p.add_argument("spec", metavar="SPEC", help="the .par spec to draw (`-`: read it from stdin)")
    p.add_argument("--what", choices=WHAT, default="mesh", help="what to draw (default: mesh)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write FILE.svg or FILE.png (default: the SVG on stdout); PNG needs "
                        "the png extra, pip install \"parc[png]\"")
    p.add_argument("--max-nodes", type=int, default=16, metavar="N",
                   help="mesh: draw at most N nodes, the first and the last (default: 16)")
    p.add_argument("--microbatches", type=int, metavar="M",
                   help="schedule: draw M microbatches (default: enough to show the pattern)")
    from parc.cli.targets import add_target

    add_target(p)
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")


PNG_EXTRA = 'pip install "parc[png]"'


def png_unavailable() -> str | None:
    """Why PNG cannot be written here (None when it can): cairosvg missing, or installed
    without the cairo library it loads."""
    try:
        import cairosvg  # noqa: F401  # type: ignore[import-not-found]
    except ImportError:
        return f"PNG output needs the png extra ({PNG_EXTRA}: cairosvg), which is not installed"
    except OSError as e:  # cairocffi found no libcairo
        return (f"PNG output needs the cairo library, which cairosvg cannot load ({e}); install it "
                "(libcairo2 on Debian and Ubuntu, cairo on Homebrew)")
    return None


def to_png(svg_text: str) -> bytes:
    """PNG bytes at twice the SVG's size, through cairosvg (the `png` extra)."""
    import cairosvg  # type: ignore[import-not-found]

    return cairosvg.svg2png(bytestring=svg_text.encode("utf-8"), scale=2.0)


def run(args) -> int:
    from parc.report.diagnostics.text import render_text
    from parc.report.term import use_color
    from parc.cli.common import load_spec, read_error, unread

    out = args.output
    ext = os.path.splitext(out)[1].lower() if out else ".svg"
    if ext not in (".svg", ".png"):
        print(f"parc draw: cannot tell the format of {out}: name it .svg or .png", file=sys.stderr)
        return 2
    if ext == ".png":
        why = png_unavailable()
        if why:
            print(f"parc draw: {why}; or write .svg", file=sys.stderr)
            return 2
    try:
        r = load_spec(args.spec, args.target, root=args.root)
    except OSError as e:
        print(read_error(args.spec, e), file=sys.stderr)
        return 2
    if (code := unread(r)) is not None:
        return code
    if r.plan is None or r.errors:
        text = render_text(r.errors, r.sources, color=use_color(sys.stderr))
        sys.stderr.write(text + ("" if text.endswith("\n") else "\n"))
        sys.stderr.write(f"parc: cannot draw {args.spec}: it has {count(len(r.errors), 'error')}\n")
        return 1
    from parc.report import svg

    if args.what == "timeline" and r.plan.mode != "serve":
        print(f"parc draw: --what timeline draws a serving plan's prefill and decode steps, and {r.file} "
              "is a training plan: draw its pipeline with --what schedule", file=sys.stderr)
        return 2
    if args.what == "mesh":
        picture = svg.mesh(r.plan, max_nodes=max(2, args.max_nodes))
    elif args.what == "schedule":
        if args.microbatches is not None:
            from parc.model import schedules

            why = schedules.check(r.plan.schedule.pipeline, r.plan.mesh.pp, args.microbatches,
                                  r.plan.schedule.virtual_stages) \
                if r.plan.mesh.pp > 1 and r.plan.mode == "train" else None
            if why or args.microbatches < 1:
                print(f"parc draw: --microbatches {args.microbatches}: {why or 'must be at least 1'}",
                      file=sys.stderr)
                return 2
        picture = svg.schedule(r.plan, microbatches=args.microbatches)
    elif args.what == "timeline":
        picture = svg.draw(r.plan, "timeline")
    else:
        picture = svg.memory(r.plan)
    if not out:
        sys.stdout.write(picture)
        return 0
    from parc.cli.output import write_output

    if (code := write_output(out, to_png(picture) if ext == ".png" else picture)):
        return code
    if not args.quiet:
        print(f"wrote {out}", file=sys.stderr)
    return 0
