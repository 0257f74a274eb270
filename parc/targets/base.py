"""What every backend shares: the emitted file, shell variables in commands, the plan's JSON,
names derived from the plan, the environment the links call for, and the settings checks."""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass



@dataclass(frozen=True, slots=True)
class File:
    """One emitted file: its path relative to the output folder, its text, and whether it runs."""

    path: str
    text: str
    executable: bool = False


@dataclass(frozen=True, slots=True)
class Var:
    """A shell variable used as one word of a command (rendered as ``"${name}"``)."""

    name: str


@dataclass(frozen=True, slots=True)
class Cat:
    """One shell word made of parts, each quoted on its own: ``Cat((Var("addr"), ":6379"))``."""

    parts: tuple


@dataclass(frozen=True, slots=True)
class Env:
    """An exported variable; ``default`` keeps a value the user's environment already sets;
    ``value`` None unsets it (a shell target only); a :class:`Var` of an engine's run
    (parc/targets/engines.py) is what the scheduler gives each node."""

    name: str
    value: str | Var | None
    comment: str = ""
    default: bool = True


# ---------------------------------------------------------------------------------------------
def settings(plan, name: str) -> dict:
    return plan.target_settings(name)


def need(plan, name: str, key: str, owner: str | None = None):
    """The value of target ``owner``'s (default ``name``'s) ``key``, which target ``name``'s launch
    cannot do without; a plan that lacks it (one the checks refused, handed to the builder
    anyway) stops with P602's diagnostic, never a KeyError."""
    from parc.language.diagnostics import Diagnostic, ParcError

    owner = owner or name
    s = settings(plan, owner)
    if key in s:
        return s[key]
    where = f"target.{owner}"
    raise ParcError(Diagnostic("P602", "error", f"target {name} needs `{key}` in `target {owner}`, and the plan "
                               "has none (its checks refuse it: compile prints their diagnostics)",
                               plan.span(where, "model")))


def spec_name(plan) -> str:
    return os.path.basename(plan.file)


def plan_json(plan) -> str:
    """The resolved plan as ``plan.json``: ``Plan.to_dict()``, keys sorted, two-space indent."""
    return json.dumps(plan.to_dict(), indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def plan_id(plan) -> str:
    """A short id of the plan's resolved content (the rendezvous id shared by all nodes): the
    plan without the spec's path, so nodes that compile the same plan from a file named or
    placed differently still meet, and a changed plan gets a new id."""
    d = plan.to_dict()
    d.pop("file", None)
    text = json.dumps(d, indent=2, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def mesh_text(plan) -> str:
    m = plan.mesh
    s = " x ".join(f"{ax}={m.size(ax)}" for ax in m.order)
    if plan.model.is_moe:
        s += f" (ep={m.ep}, etp={m.etp})"
    return s


def order_over(plan) -> list[str]:
    """The mesh order restricted to the axes of size > 1 (size-1 axes place no ranks)."""
    m = plan.mesh
    return [ax for ax in m.order if m.size(ax) > 1]


DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def dns_label(text: str, limit: int = 40) -> str:
    """A DNS-1035 label made from ``text``: lowercase letters, digits and '-', starting with a
    letter and ending with a letter or digit, at most ``limit`` characters. Kubernetes names
    Services (and so the pods behind them) with DNS-1035 labels, so a name that begins with a
    digit, like one made from the model label "70b-custom", takes the prefix ``parc-``."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not s[:1].isalpha():
        s = ("parc-" + s).strip("-")
    s = s[:limit].rstrip("-")
    assert DNS_1035.fullmatch(s), s
    return s


def is_dns_label(text: str, limit: int, rfc: int = 1035) -> bool:
    """Whether ``text`` is a DNS label of at most ``limit`` characters: RFC 1035 (starts with a
    letter) or RFC 1123 (may start with a digit). The whole text must match: a trailing newline
    is not allowed, as ``re.match`` with ``$`` would."""
    pattern = DNS_1035 if rfc == 1035 else DNS_1123
    return len(text) <= limit and pattern.fullmatch(text) is not None


def plain_ifname(ifname: str | None) -> str | None:
    """The interface names in an NCCL_SOCKET_IFNAME value (``=eth0`` is exactly eth0), or None
    where it is an exclusion (``^lo,docker``) that only NCCL understands."""
    if not ifname or ifname.startswith("^"):
        return None
    return ifname[1:] if ifname.startswith("=") else ifname


def nccl_env(plan) -> list[Env]:
    """NCCL settings the links call for; a value already in the environment wins.

    The cluster's ``socket_ifname`` names the interface NCCL and Gloo open their sockets on
    (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME), for nodes with several networks.
    Nodes linked by Ethernet have no InfiniBand for NCCL to probe (NCCL_IB_DISABLE=1); from
    100 Gb/s on, NCCL's guide suggests 4 socket threads with 4 sockets each to fill the link
    (NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD; their product must stay at most 64)."""
    cl = plan.cluster
    out: list[Env] = []
    if cl.socket_ifname:
        out.append(Env("NCCL_SOCKET_IFNAME", cl.socket_ifname,
                       "the cluster's network interface for NCCL's and Gloo's sockets"))
        gloo = plain_ifname(cl.socket_ifname)
        if gloo:   # Gloo takes interface names only, not NCCL's ^exclusions
            out.append(Env("GLOO_SOCKET_IFNAME", gloo))
    if cl.nodes > 1 and cl.inter_node is not None and cl.inter_node.kind == "ethernet":
        out.append(Env("NCCL_IB_DISABLE", "1", "nodes are linked by Ethernet: NCCL uses TCP sockets"))
        if cl.inter_node.bandwidth >= 100e9 / 8:
            out.append(Env("NCCL_SOCKET_NTHREADS", "4", "100 Gb/s or more over sockets: 4 threads x 4 sockets"))
            out.append(Env("NCCL_NSOCKS_PERTHREAD", "4"))
    return out


def device_env(plan, target: str | None = None) -> list[Env]:
    """The node's GPU order (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES on AMD) where the plan's
    groups land on NVLink islands only in that order (:func:`parc.model.topology.visible_devices`,
    under the rank order ``target`` imposes, if any): local rank i then runs on physical GPU
    order[i] on every node."""
    from parc.model.targets import rank_order
    from parc.model.topology import visible_devices, visible_devices_var

    order = visible_devices(plan, rank_order(target, plan.mode) if target else None)
    if not order:
        return []
    return [Env(visible_devices_var(plan.cluster), ",".join(map(str, order)),
                "the GPU order that keeps each group of consecutive ranks on one NVLink island "
                "(the cluster's topology)", default=False)]


def target_span(plan, c, name, fallback: str | None = None):
    """The target's block; without one (a target asked for with --target), the block the fix
    belongs to (``fallback``), never the top of the file."""
    if f"target.{name}" in plan.spans or fallback is None:
        return c.at(f"target.{name}")
    return c.at(fallback)


# ---------------------------------------------------------------------------------------------
# Values that land where a launcher reads options. Every target key of kind "str" is checked
# (an entry point, a model id, a host, a name: none of them begins with '-'); keys of kind
# "strlist" are option lists passed as given (`args`, `extra_args`) and are not. A key's
# definition in target.toml overrides that with `leading_dash`: "refuse" (checked, for a list
# item by item), "options" (meant to hold options) or "name" (the target's own name rule
# refuses it already, as P661 does for Kubernetes names).
DASH_DEFAULT = {"str": "refuse", "strlist": "options"}


def _dash(d: dict) -> str | None:
    return d.get("leading_dash", DASH_DEFAULT.get(d.get("kind", "any")))


def dash_keys() -> dict[tuple[str, str], str]:
    """(target, key) -> kind, for every target key whose values P690 checks."""
    from parc.model.targets import keys, names

    return {(t, key): d.get("kind", "any") for t in names() for key, d in keys(t).items() if _dash(d) == "refuse"}


def option_lists(target: str) -> list[str]:
    """The keys of ``target`` meant to hold the program's options (`args`, `extra_args`)."""
    from parc.model.targets import keys

    return [k for k, d in keys(target).items() if _dash(d) == "options"]
