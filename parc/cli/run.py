"""parc run: execute the plan in PyTorch, or rehearse it on this machine's CPU."""
from __future__ import annotations

import json
import os
import sys

DESCRIPTION = ("Execute the plan in PyTorch. --rehearse shrinks the model (keeping every divisibility "
               "of the plan) and runs the exact mesh as local CPU processes; without it the plan runs "
               "at its real size where it is launched (one process per GPU under the emitted torchrun "
               "script).")
EPILOG = """exit status: 0 ran (and verified, with --verify), 1 spec errors, a failed rank or a failed
verification, 2 usage or I/O failure

examples:
  parc run examples/llama3-70b-train.par --rehearse --verify --optimizer sgd
  parc run spec.par --rehearse --steps 2 --report run.json
  torchrun --nproc-per-node 8 -m parc run spec.par"""


def add_arguments(p):
    p.add_argument("spec", metavar="SPEC", help="the .par file to run (`-`: read it from stdin), or a plan.json "
                   "that `parc compile` wrote")
    p.add_argument("--rehearse", action="store_true",
                   help="shrink the model and run the exact mesh as local CPU processes (gloo)")
    p.add_argument("--steps", type=int, default=3, metavar="N", help="training steps (default: 3)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data (default: 0)")
    p.add_argument("--optimizer", choices=("sgd", "adam", "adamw"),
                   help="override the train block's optimizer (default with --verify: sgd, whose "
                        "parameters compare to 1e-6; adam's compare within what its normalised step allows)")
    p.add_argument("--lr", type=float, metavar="LR", help="learning rate (default: 0.05 for sgd, 1e-3 for adam)")
    p.add_argument("--verify", action="store_true",
                   help="also run the single-process reference and compare losses, gradients and parameters")
    p.add_argument("--report", metavar="FILE", help="write the JSON report here")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="resume from DIR if it holds a checkpoint (any plan), and save there at the end")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds a collective may wait before the run fails (default: 120)")
    p.add_argument("--deadline", type=float, metavar="S",
                   help="seconds the whole rehearsal may take before every rank is stopped "
                        "(default: --timeout × (steps + 3) + 60)")
    p.add_argument("--max-ranks", type=int, default=64, metavar="N",
                   help="the most ranks a rehearsal forks on this machine (default: 64)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where a real run executes (default: cuda when available); rehearsals use the CPU")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in")
    p.add_argument("--format", choices=("text", "json"), default="text", help="summary format on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")


class _Refused(Exception):
    """The command ends before or instead of a report: exit ``code``, one line, diagnostics."""

    def __init__(self, code: int, message: str, diagnostics=(), rank=None):
        super().__init__(message)
        self.code, self.message, self.diagnostics, self.rank = code, message, list(diagnostics), rank


def run(args) -> int:
    """With --format json, stdout holds one JSON object whatever happens: the report (with
    ``"ok"``), or ``{"ok": false, "error", "exit_code", "rank", "diagnostics"}``."""
    try:
        return _run(args)
    except _Refused as e:
        print(f"parc: {e.message}", file=sys.stderr)
        if args.format == "json":
            from parc.report.run import render_refusal

            sys.stdout.write(render_refusal(e.message, e.code, e.rank, e.diagnostics))
        return e.code


def _run(args) -> int:
    import time

    t_start = time.perf_counter()
    from parc.progress import Progress

    bar = Progress(args.steps, "parc run") if not args.quiet else None
    if bar:
        bar.phase("checking")
    from parc.report.diagnostics.text import render_text
    from parc.cli.common import load_spec, read_error, read_failed

    if args.steps < 0:
        raise _Refused(2, "error: --steps must be 0 or more")
    if args.verify and args.steps == 0:
        raise _Refused(2, "error: --verify needs at least one step (--steps 0 would compare nothing)")
    if args.checkpoint and os.path.exists(args.checkpoint) and not os.path.isdir(args.checkpoint):
        raise _Refused(2, f"error: --checkpoint names {args.checkpoint}, which is a file: give a folder "
                          "(parc loads the checkpoint there and saves to it)")
    if args.report:     # refused now rather than after the run
        from parc.cli.output import WRITE_FAILED, Unwritten, check_path

        try:
            check_path(args.report)
        except Unwritten as e:
            raise _Refused(WRITE_FAILED, str(e)) from None
    if args.spec.endswith(".json"):
        plan, why = _compiled_plan(args.spec)
        if plan is None:
            raise _Refused(2, why)
    else:
        try:
            res = load_spec(args.spec, root=args.root)
        except OSError as e:
            raise _Refused(2, read_error(args.spec, e).removeprefix("parc: ")) from None
        if read_failed(res):
            from parc.resolve.reader import READ_CODE

            unread_diags = [d for d in res.diagnostics if d.code == READ_CODE]
            raise _Refused(2, unread_diags[0].message, unread_diags)
        if not res.ok or res.plan is None:
            if bar:
                bar.close()
            sys.stderr.write(render_text(res.errors, res.sources))
            raise _Refused(1, f"{args.spec} has errors; `parc check {args.spec}` lists them", res.errors)
        plan = res.plan

    from parc.runtime.launch import RunFailed, Stopped, prepare_env
    from parc.runtime.options import CheckpointError, Options, RunError
    from parc.runtime.run import run_plan

    prepare_env(fork=args.rehearse)
    opts = Options(steps=args.steps, seed=args.seed, optimizer=args.optimizer, lr=args.lr,
                   verify=args.verify, checkpoint=args.checkpoint, timeout=args.timeout,
                   device="cpu" if args.device == "cpu" else "cuda" if args.device == "cuda" else "auto",
                   fault=os.environ.get("PARC_INJECT_FAULT") or None)
    if plan.pools:
        return _run_pools(args, plan, opts, bar, t_start)
    try:
        report = run_plan(plan, opts, rehearse=args.rehearse, progress=False, bar=bar, t_start=t_start,
                          max_ranks=args.max_ranks, deadline_s=args.deadline)
    except CheckpointError as e:
        raise _Refused(2, f"run refused: {e}") from None
    except (RunFailed, RunError) as e:
        if os.environ.get("PARC_DEBUG") and getattr(e, "detail", ""):
            sys.stderr.write(e.detail)
        raise _Refused(1, f"run failed: {e}", rank=getattr(e, "rank", None)) from None
    except Stopped as e:
        raise _Refused(128 + e.signum, f"run {e}") from None
    if report is None:          # a rank other than 0 under torchrun
        return 0
    _write_report(args.report, report)
    v = report["verify"]
    failed = v["ran"] and not v["passed"]
    if not args.quiet:
        from parc.report import run as render

        sys.stdout.write(render.render_json(report, not failed) if args.format == "json"
                         else render.render_text(report, args.spec))
    return 1 if failed else 0


def _write_report(path, report: dict) -> None:
    """--report FILE: the report as JSON (exit 2 where it cannot be written)."""
    if not path:
        return
    from parc.cli.output import WRITE_FAILED, Unwritten, put_file

    try:
        put_file(path, json.dumps(report, indent=2) + "\n")
    except Unwritten as e:
        raise _Refused(WRITE_FAILED, str(e)) from None


def _run_pools(args, plan, opts, bar, t_start) -> int:
    """A disaggregated plan: one instance of each pool, one after the other (the pools share
    no collective; each instance is an ordinary serving plan, parc.model.pools)."""
    import time

    from parc.model.pools import pool_plans
    from parc.report import run as render
    from parc.runtime.launch import RunFailed, Stopped
    from parc.runtime.options import CheckpointError, RunError
    from parc.runtime.run import run_plan

    if args.checkpoint:
        raise _Refused(2, "error: --checkpoint saves one plan's weights; a disaggregated plan runs two pools")
    if bar:
        bar.close()
    reports = []
    for pool, pplan in pool_plans(plan):
        try:
            rep = run_plan(pplan, opts, rehearse=args.rehearse, progress=False, t_start=time.perf_counter(),
                           max_ranks=args.max_ranks, deadline_s=args.deadline)
        except (RunFailed, RunError, CheckpointError) as e:
            raise _Refused(1, f"run of the {pool.name} pool failed: {e}", rank=getattr(e, "rank", None)) from None
        except Stopped as e:
            raise _Refused(128 + e.signum, f"run {e}") from None
        if rep is None:
            return 0
        reports.append({"pool": pool.name, "instances": pool.instances, **rep})
    out = {"pools": reports, "timing": {"total": time.perf_counter() - t_start}}
    failed = any(r["verify"]["ran"] and not r["verify"]["passed"] for r in reports)
    _write_report(args.report, out)
    if not args.quiet:
        if args.format == "json":
            sys.stdout.write(render.render_json(out, not failed))
        else:
            for r in reports:
                sys.stdout.write(render.render_text(r, f"{args.spec} ({r['pool']} pool, one of "
                                                       f"{r['instances']} instance{'s' if r['instances'] != 1 else ''})"))
    return 1 if failed else 0


def _compiled_plan(path: str):
    """A plan.json that `parc compile` wrote (validated) and "", or None and why not."""
    from parc.model.plan import plan_from_dict

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return plan_from_dict(data.get("plan", data) if isinstance(data, dict) else data), ""
    except OSError as e:
        return None, f"cannot read {path}: {e.strerror or e}"
    except ValueError as e:   # JSON or validation errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"{path} is not a plan that `parc compile` wrote: {first}"
