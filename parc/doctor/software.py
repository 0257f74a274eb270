"""torch and the engines the spec's targets start, against the releases the spec pins.

The installed version of each engine (node.toml [engines] names its distribution) is matched to
a release the target knows (target.toml [versions] known) by its leading components: vLLM
0.33.1 is the release 0.33, SGLang 0.5.23.post1 the release 0.5.23. Releases are compared by
name, never by parsing them as numbers (parc.model.targets)."""
from __future__ import annotations

from parc.doctor.context import Context
from parc.doctor.findings import Finding, Passed, finding, node_facts
from parc.model.targets import display, pinned, versions

CHECK = "software"


def release_of(target: str, installed: str) -> str | None:
    """The release of ``target`` parc knows that version ``installed`` belongs to (the longest
    match: ``0.33.1`` belongs to ``0.33``), or None."""
    hits = [r for r in versions(target) if installed == r or installed.startswith(r + ".")
            or installed.startswith(r + "+")]
    return max(hits, key=len) if hits else None


def check(ctx: Context) -> list[Finding | Passed]:
    out: list[Finding | Passed] = []
    if ctx.launch_targets() or not ctx.plan.targets:
        torch = ctx.probes.version("torch")
        if torch is None:
            out.append(finding("D111", CHECK, "torch is not installed in this Python environment "
                               f"({ctx.env.get('VIRTUAL_ENV') or 'the interpreter running parc'})"))
        else:
            out.append(_gpu_build(ctx, torch))
    for engine in ctx.engines():
        out.append(_engine(ctx, engine))
    return out


def _gpu_build(ctx: Context, torch: str) -> Finding | Passed:
    """torch built for a GPU (CUDA or ROCm, read from torch/version.py), as every plan needs:
    a CPU-only build imports and runs, and sees no device."""
    build = ctx.probes.torch_build()
    if build is not None and not build.get("cuda") and not build.get("hip"):
        gpn = ctx.plan.cluster.gpus_per_node
        return finding("D111", CHECK, f"torch {build.get('version') or torch} is a CPU-only build (built for "
                       f"neither CUDA nor ROCm): it sees no GPU, and the plan runs on {gpn} GPUs per node",
                       torch=build.get("version") or torch)
    return Passed(CHECK, f"torch {torch}")


def _engine(ctx: Context, engine: str) -> Finding | Passed:
    package = node_facts()["engines"][engine]["package"]
    want = pinned(ctx.plan, engine)
    name = display(engine)
    how = "the spec pins" if "version" in ctx.plan.target_settings(engine) else "the spec launches (the newest parc knows)"
    data = dict(target=engine, package=package, pinned=want)
    got = ctx.probes.version(package)
    if got is None:
        return finding("D112", CHECK, f"{name} is not installed (the Python package {package}); {how} {name} {want}",
                       **data)
    release = release_of(engine, got)
    if release is None:
        known = ", ".join(versions(engine))
        return finding("D114", CHECK, f"{name} {got} is installed, a release parc does not know for {name} "
                       f"({known}); {how} {want}", installed=got, **data)
    if want is not None and release != want:
        return finding("D113", CHECK, f"{name} {got} is installed; {how} {name} {want}", installed=got,
                       installed_release=release, **data)
    return Passed(CHECK, f"{name} {got}, the release the spec pins ({want})")
