"""SkyPilot: ``task.yaml``, a SkyPilot task that launches the plan on any cloud SkyPilot reaches
(``sky launch -c NAME task.yaml``), and the resolved plan as ``plan.json`` beside it.

The task asks for ``num_nodes`` nodes of ``accelerators: <NAME>:<gpus_per_node>`` (SkyPilot's
name for the cluster's GPU: ``accelerators.toml`` beside this file, or the target key
``accelerator``). Its ``setup``, which SkyPilot runs on every node, writes the launch of the
engine the block's ``engine`` names (parc/targets/engines.py: torchrun, torchtitan, megatron,
deepspeed, vllm, sglang), the engine target's own files with ``plan.json``, into
``~/.parc/<plan id>/``, each file a quoted here-document whose delimiter carries a hash of its
text (so no line of the file can end it). Its ``run``, which SkyPilot starts on every node at
once, checks that SkyPilot gave the node the GPUs the plan runs on
(``SKYPILOT_NUM_GPUS_PER_NODE``), takes node 0's address from the first line of
``SKYPILOT_NODE_IPS`` as ``MASTER_ADDR`` and runs that launch with the node's
``SKYPILOT_NODE_RANK``: the same rendezvous and engine options as anywhere else, so the rank map
and the degrees are the engine target's exactly (sky/skylet/constants.py names the variables;
sky/backends/task_codegen.py sets them, node 0 the head, whose address comes first).

A plan of several runs placed node by node (a prefill/decode-disaggregated plan; SGLang servers
behind a router) asks for every node they take and runs ``node.sh`` (:mod:`parc.targets.pooled`)
with the node's ``SKYPILOT_NODE_RANK`` and every node's address: it starts the engine's scripts
placed on that node, and on node 0 the proxy or router, whose port the task opens.

A served plan opens the API's port (``resources.ports``). Several nodes linked by InfiniBand ask
for ``network_tier: best`` (the cloud's InfiniBand or GPUDirect network) unless the block says
otherwise.
"""
from __future__ import annotations

import hashlib
import tomllib
from functools import lru_cache
from pathlib import Path

from parc.targets.base import File, dns_label, mesh_text, plan_id, plan_json, settings, spec_name
from parc.targets.engines import launch
from parc.words import count

TARGET = "skypilot"
NAME_MAX = 40
HERE = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def _accelerators() -> dict[str, str]:
    with open(HERE / "accelerators.toml", "rb") as f:
        return tomllib.load(f)["gpus"]


def accelerator(plan) -> str | None:
    """SkyPilot's name for the cluster's GPU: the block's ``accelerator``, else the table's name
    for the GPU preset (None for a GPU without one)."""
    return settings(plan, TARGET).get("accelerator") or _accelerators().get(plan.cluster.gpu.name)


def infra_pattern() -> str:
    """The `infra` values SkyPilot's task schema accepts (sky/utils/schemas.py _get_infra_pattern)."""
    from parc.model.targets import spec

    clouds = "|".join(spec(TARGET)["infra"]["clouds"])
    return (f"(?:(?i:({clouds}))(?:/[^/]+(?:/[^/]+)?)?|\\*(?:/[^/]+(?:/[^/]+)?)?|"
            "(?i:kubernetes|k8s)(?:/.+)?)")


def task_name(plan) -> str:
    return settings(plan, TARGET).get("name") or dns_label(plan.model.name, NAME_MAX)


def network_tier(plan) -> str | None:
    s = settings(plan, TARGET)
    if "network_tier" in s:
        return s["network_tier"]
    cl = plan.cluster
    ib = cl.nodes > 1 and cl.inter_node is not None and cl.inter_node.kind == "infiniband"
    return "best" if ib else None


def heredoc(path: str, text: str) -> str:
    """Shell that writes ``text`` to ``path`` exactly: a quoted here-document (no expansion) whose
    delimiter carries the text's hash, so no line of the text can close it early."""
    end = "PARC_EOF_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"cat > {path} <<'{end}'\n{text}{'' if text.endswith(chr(10)) else chr(10)}{end}\n"


def yaml_text(text: str, indent: int = 2):
    """A shell script as a YAML scalar: a literal block where the text allows one (printable
    ASCII, a first line that does not begin with a space), else a double-quoted scalar."""
    from parc.targets.render import Quoted, y, yblock

    plain = all(ch == "\n" or " " <= ch <= "~" for ch in text) and not text.startswith(" ")
    return Quoted("|\n" + yblock(text, indent)) if plain and text.strip() else y(text)


def scripts(plan, node) -> tuple[str, str]:
    """(setup, run): the shell SkyPilot runs on every node to start ``node`` (the engine's
    :class:`~parc.targets.engines.NodeLaunch`)."""
    from parc.targets.render import Quoted, render

    s = settings(plan, TARGET)
    files = node.files
    # shell text parc writes itself (the folder is a fixed word, the files' text goes in
    # here-documents) and the spec's own setup, which is shell by definition
    folder = f'"$HOME/.parc/{plan_id(plan)}"'
    setup = render("skypilot/setup.sh.j2", user=Quoted(s["setup"]) if s.get("setup") else None,
                   folder=Quoted(folder), writes=[Quoted(heredoc(f"{folder}/{f.path}", f.text)) for f in files],
                   executables=[Quoted(f"{folder}/{f.path}") for f in files if f.executable])
    run = render("skypilot/run.sh.j2", gpus=plan.cluster.gpus_per_node, multi=node.nodes > 1 or node.hosts,
                 pooled=node.hosts, script=Quoted(f"{folder}/{node.script}"))
    return setup, run


def build(plan) -> list[File]:
    from parc.targets.pooled import pools_text
    from parc.targets.render import render

    s = settings(plan, TARGET)
    cl = plan.cluster
    name = task_name(plan)
    node = launch(plan, TARGET)
    setup, run = scripts(plan, node)
    what = "serves" if plan.mode == "serve" else "trains"
    header = [f"SkyPilot task compiled by parc from {spec_name(plan)}: sky launch -c {name} task.yaml",
              f"{pools_text(plan) if plan.pools else 'Mesh: ' + mesh_text(plan)}; {count(node.nodes, 'node')} x "
              f"{cl.gpus_per_node} {accelerator(plan)} = {count(plan.world_size, 'rank')}; every node {what} with the "
              f"{node.engine} target's launch."]
    port = node.port if plan.mode == "serve" else None
    text = render("skypilot/task.yaml.j2", header=header, name=name, workdir=s.get("workdir"), nodes=node.nodes,
                  accelerators=f"{accelerator(plan)}:{cl.gpus_per_node}", infra=s.get("infra"),
                  image_id=s.get("image_id"), use_spot=s.get("use_spot"), disk_size=s.get("disk_size"),
                  cpus=s.get("cpus"), memory=s.get("memory"),
                  network_tier=network_tier(plan), port=port, setup=yaml_text(setup), run=yaml_text(run))
    return [File("task.yaml", text), File("plan.json", plan_json(plan))]
