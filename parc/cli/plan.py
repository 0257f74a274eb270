"""parc plan: search every valid plan for a model on a cluster and rank them by the cost model."""
from __future__ import annotations

import os
import sys

DESCRIPTION = """Search every parallelism plan of a model on a cluster that passes parc's rules and fits
in memory, and rank them by the cost model: training by step time for the global batch,
serving by throughput at the memory limit. Give --model and --cluster, or a partial SPEC:
every field it gives is kept, every field it leaves out (or sets to `auto`) is searched."""
EPILOG = """exit status: 0 plans found, 1 no plan fits (or the spec has errors), 2 usage or I/O failure

examples:
  parc plan --model llama3_70b --cluster examples/clusters/dgx-h100-8node.par --global-batch 512
  parc plan --model llama3_70b --cluster box.par --serve --seq-len 8192 -o best.par
  parc plan examples/llama3-70b-train.par --top 5 --format json
  parc plan --model deepseek_v3 --cluster h200.par --serve --objective min-gpus --ttft 2s --tpot 50ms \\
      --concurrency 512 -o serve.par
  parc plan --model llama3_70b --cluster box.par --serve --objective tokens-per-gpu --tpot 40ms"""


def add_arguments(p):
    p.add_argument("spec", nargs="?", metavar="SPEC", help="a partial spec to search around (`-`: read it from stdin)")
    p.add_argument("--model", metavar="PRESET|FILE",
                   help="a model preset, or a .par file holding a `model` block (with SPEC: if it has none)")
    p.add_argument("--cluster", metavar="FILE",
                   help="a .par file holding a `cluster` block (with SPEC: if it has none)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--train", action="store_true", help="search training plans (the default)")
    mode.add_argument("--serve", action="store_true", help="search serving plans")
    p.add_argument("--seq-len", type=int, metavar="N", help="sequence length (serving: max_model_len)")
    p.add_argument("--global-batch", type=int, metavar="N",
                   help="sequences per training step (default: the spec's, else about 4M tokens)")
    p.add_argument("--top", type=int, default=10, metavar="K", help="how many plans to report (default 10)")
    sv = p.add_argument_group("serving deployments (with --serve; any of these searches replicas, "
                              "dp-attention with ep, dcp and prefill/decode pools)")
    sv.add_argument("--objective", choices=("min-gpus", "tokens-per-gpu"),
                    help="min-gpus: the fewest GPUs that meet the latency targets at --concurrency; "
                         "tokens-per-gpu: the most output tokens/s per GPU that meets them")
    sv.add_argument("--ttft", type=_duration, metavar="TIME", help="time to first token, at most (2s, 500ms)")
    sv.add_argument("--tpot", type=_duration, metavar="TIME", help="time per output token, at most (50ms)")
    sv.add_argument("--concurrency", type=_positive, metavar="N", help="requests in flight (default: the spec's)")
    sv.add_argument("--prompt-tokens", type=_positive, metavar="N", help="prompt tokens per request (default: "
                    "the spec's, else 1024)")
    sv.add_argument("--output-tokens", type=_positive, metavar="N", help="output tokens per request (default: "
                    "the spec's, else 128)")
    sv.add_argument("--no-pools", action="store_true", help="do not try prefill/decode disaggregation")
    p.add_argument("-o", "--output", metavar="FILE", help="write the best plan there as a formatted spec")
    from parc.cli.targets import add_target

    add_target(p, help="also apply this target's rules to the plans (repeatable)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    p.add_argument("--root", metavar="DIR", help="the folder imports must stay in")


def _duration(text: str) -> float:
    """Seconds from ``2s``, ``50ms``, ``800us`` or a bare number of seconds."""
    import argparse

    t = text.strip().lower()
    for unit, f in (("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("s", 1.0)):
        if t.endswith(unit):
            t, scale = t[: -len(unit)], f
            break
    else:
        scale = 1.0
    try:
        v = float(t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time (2s, 50ms)") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above zero")
    return v


def _positive(text: str) -> int:
    import argparse

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return v


_SERVE_GOAL = ("objective", "ttft", "tpot", "concurrency", "prompt_tokens", "output_tokens", "no_pools")


def _usage(msg: str, args=None, code: int = 2, diagnostics=()) -> int:
    """A refusal: on stderr, and with ``--format json`` as one JSON object on stdout too."""
    sys.stderr.write(f"parc plan: {msg}\n")
    if args is not None and args.format == "json":
        _json_refusal(args, msg, diagnostics)
    return code


def _json_refusal(args, error: str | None, diagnostics=()) -> None:
    import json

    print(json.dumps({"ok": False, "file": args.spec, "error": error,
                      "diagnostics": [d.to_json() for d in diagnostics]}, indent=2, ensure_ascii=False))


def run(args) -> int:
    from parc.planner import InputError, search_problem
    from parc.planner.emit import plan_text
    from parc.progress import Progress
    from parc.report.diagnostics.text import write
    from parc.report.plan import render_text as render_result
    from parc.planner.inputs import load_spec, problem, with_seq_len
    from parc.resolve.reader import STDIN, STDIN_NAME, read_stdin

    if args.top < 1:
        return _usage("--top must be at least 1", args)
    if args.output and (code := _unwritable(args)):      # refused now rather than after the search
        return code
    for flag in ("seq_len", "global_batch"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            return _usage(f"--{flag.replace('_', '-')} must be at least 1", args)
    try:
        if args.spec:
            stdin = args.spec == STDIN
            pr = load_spec(STDIN_NAME if stdin else args.spec, root=args.root, model=args.model,
                           cluster=args.cluster, mode="serve" if args.serve else "train",
                           text=read_stdin() if stdin else None)
            if args.serve and pr.mode != "serve" or args.train and pr.mode != "train":
                return _usage(f"{args.spec} is a {'serving' if pr.mode == 'serve' else 'training'} spec; "
                              f"drop --{'serve' if args.serve else 'train'}", args)
            if args.seq_len is not None:
                if pr.mode == "serve":
                    pr.serve.max_model_len = args.seq_len
                else:
                    pr.model = with_seq_len(pr.model, args.seq_len)
            if args.global_batch is not None:
                if pr.mode == "serve":
                    return _usage("--global-batch is for training", args)
                pr.global_batch, pr.microbatches = args.global_batch, None
        else:
            if not args.model or not args.cluster:
                return _usage("give a SPEC, or both --model and --cluster (see `parc plan --help`)", args)
            mode = "serve" if args.serve else "train"
            if mode == "serve" and args.global_batch is not None:
                return _usage("--global-batch is for training", args)
            pr = problem(args.model, args.cluster, mode, seq_len=args.seq_len, global_batch=args.global_batch,
                         root=args.root)
    except InputError as e:
        if e.diagnostics:
            write(e.diagnostics, e.sources, sys.stderr)
            if args.format == "json":
                _json_refusal(args, str(e), e.diagnostics)
            return 1
        return _usage(str(e), args)

    from parc.planner.emit import default_targets, launch_targets

    pr, args.notes = launch_targets(pr, default_targets(pr, args.target))
    if any(getattr(args, k) not in (None, False) for k in _SERVE_GOAL):
        if pr.mode != "serve":
            return _usage("--objective, --ttft, --tpot, --concurrency and the token counts are for --serve", args)
        return _run_serve_goal(args, pr)
    bar = Progress(after=1.0)
    try:
        res = search_problem(pr, top=args.top, targets=args.target, progress=bar.fraction)
    finally:
        bar.close()

    return _finish(args, res, plan_text(res) if res.plans else None, render_result)


def _unwritable(args) -> int:
    """2 when ``-o`` names a path that parc.cli.output refuses (said as every command says it,
    and with --format json in the refusal's object too), else 0."""
    from parc.cli.output import Unwritten, check_path, refuse

    try:
        check_path(args.output)
    except Unwritten as e:
        if args.format == "json":
            _json_refusal(args, str(e))
        return refuse(e)
    return 0


def _finish(args, res, text, render) -> int:
    """Check the best plan's spec ``text``, write it to ``-o``, then print ``res`` (``render`` for
    text): a write that fails is said before anything claims success (with --format json, the
    object's ``ok`` is false and its ``error`` the refusal), and exits 2."""
    import json

    from parc.cli.output import Unwritten, put_file, refuse

    if text is not None:
        err = _check_text(text, args.target, args.output or "best.par")
        if err:
            return _usage("the best plan does not pass `parc check`:\n" + err, args, 1)
    failed = None
    if args.output and text is not None:
        try:
            put_file(args.output, text)
        except Unwritten as e:
            failed = e
    said = {"ok": bool(res.plans) and not failed, **({"error": str(failed)} if failed else {})}
    print(json.dumps({**said, **res.to_json()}, indent=2) if args.format == "json" else render(res))
    if failed:
        return refuse(failed)
    if args.output and text is not None:
        if args.format == "text":
            print(f"wrote {args.output}")
        for note in getattr(args, "notes", ()):
            sys.stderr.write(f"parc plan: {args.output}: {note}\n")
    return 0 if res.plans else 1


def _check_text(text: str, targets, name: str) -> str:
    """The errors `parc check` gives the written plan (empty when it passes)."""
    from parc.api import check_file
    from parc.report.diagnostics.text import render_text

    path = os.path.abspath(name)
    from parc.planner.search import NOT_A_SHAPE

    r = check_file(path, targets, root=os.path.dirname(path), text=text)
    errors = [d for d in r.errors if d.code not in NOT_A_SHAPE]   # a key only the user knows: a note
    return render_text(errors, r.sources) if errors else ""


def _run_serve_goal(args, pr) -> int:
    """``parc plan --serve --objective ...``: the deployment search and its report."""
    from parc.planner.serve_emit import deployment_text
    from parc.planner.serve_search import search_serving, workload_goal
    from parc.report.plan_serve import render_text

    try:
        goal = workload_goal(pr, args.objective or "tokens-per-gpu", ttft=args.ttft, tpot=args.tpot,
                             concurrency=args.concurrency, prompt_tokens=args.prompt_tokens,
                             output_tokens=args.output_tokens, disaggregate=not args.no_pools)
        res = search_serving(pr, goal, top=args.top, targets=args.target)
    except ValueError as e:
        return _usage(str(e), args)
    return _finish(args, res, deployment_text(res.problem, goal, res.plans[0]) if res.plans else None, render_text)
