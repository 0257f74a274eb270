"""What every backend shares: the emitted file, shell variables in commands, the plan's JSON,
names derived from the plan, the environment the links call for, and the settings checks."""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass

from ..compiler.rules import rule


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
    ``value`` None unsets it (a shell target only)."""

    name: str
    value: str | None
    comment: str = ""
    default: bool = True


# ---------------------------------------------------------------------------------------------
def settings(plan, name: str) -> dict:
    return plan.target_settings(name)


def spec_name(plan) -> str:
    return os.path.basename(plan.file)


def plan_json(plan) -> str:
    """The resolved plan as ``plan.json``: ``Plan.to_dict()``, keys sorted, two-space indent."""
    return json.dumps(plan.to_dict(), indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def plan_id(plan) -> str:
    """A short, stable id of the plan's content (the rendezvous id shared by all nodes)."""
    return hashlib.sha256(plan_json(plan).encode()).hexdigest()[:12]


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


def dns_label(text: str, limit: int = 40) -> str:
    """A DNS-1123 label made from ``text`` (lowercase letters, digits and '-')."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return s or "parc"


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


# ---------------------------------------------------------------------------------------------
_IMAGE = '"nvcr.io/nvidia/pytorch:25.01-py3"'


@rule("P650", "kubernetes-image-missing", targets=("kubernetes",))
def kubernetes_image(plan, c):
    """The entry point is P602's; the container image is what only Kubernetes needs."""
    if "image" not in settings(plan, "kubernetes"):
        c.report(c.at("target.kubernetes"), "target kubernetes needs `image` (the container image every pod runs)",
                 help=f"add `image = {_IMAGE}` to `target kubernetes {{ ... }}`")
