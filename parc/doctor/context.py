"""What every check of parc doctor reads: the plan, the node (through its probes) and the launch
around it (node rank, node 0's address and rendezvous port, the launch folder)."""
from __future__ import annotations

from dataclasses import dataclass

from parc.doctor.findings import node_facts
from parc.doctor.probes import Probes
from parc.model.plan import Plan


@dataclass(frozen=True)
class Context:
    plan: Plan
    probes: Probes
    node_rank: int = 0
    master_addr: str | None = None   # as given (--master-addr); see :meth:`master`
    port: int | None = None          # as given (--port); see :meth:`rendezvous_port`
    launch_dir: str = "."
    spec: str = ""                   # the spec's path as the user gave it (for messages)

    @property
    def multi_node(self) -> bool:
        return self.plan.cluster.nodes > 1

    @property
    def env(self):
        return self.probes.env

    def launch_targets(self) -> list[str]:
        """The spec's targets that emit a launch, in the spec's order."""
        from parc.model.targets import is_launch, names

        known = set(names())
        return [t for t in self.plan.targets if t in known and is_launch(t)]

    def engines(self) -> list[str]:
        """The engines the launch starts (node.toml [engines]): the spec's targets and the rule
        families they bring in the plan's mode (slurm serving runs the vllm target's command)."""
        from parc.model.targets import families

        table = node_facts()["engines"]
        out: list[str] = []
        for t in self.launch_targets():
            for name in [t, *families(t, self.plan.mode, self.plan.target_settings(t), self.plan.targets)]:
                if name in table and name not in out:
                    out.append(name)
        return out

    def _endpoint(self) -> tuple[str | None, int | None]:
        """rdzv_endpoint of the torchrun (or inheriting) block: host and port."""
        for t in self.launch_targets():
            ep = self.plan.target_settings(t).get("rdzv_endpoint")
            if ep:
                host, _, port = str(ep).rpartition(":")
                return (host or str(ep)), (int(port) if port.isdigit() else None)
        return None, None

    def master(self) -> tuple[str | None, str]:
        """Node 0's address and where it came from."""
        if self.master_addr:
            return self.master_addr, "--master-addr"
        if self.env.get("MASTER_ADDR"):
            return self.env["MASTER_ADDR"], "MASTER_ADDR"
        host, _ = self._endpoint()
        return (host, "rdzv_endpoint") if host else (None, "")

    def rendezvous_port(self) -> tuple[int, str]:
        """The port node 0 hosts the rendezvous on, and where it came from: --port, MASTER_PORT,
        rdzv_endpoint, the target block (sglang's dist_port), else the launch's default."""
        if self.port:
            return self.port, "--port"
        if str(self.env.get("MASTER_PORT", "")).isdigit():
            return int(self.env["MASTER_PORT"]), "MASTER_PORT"
        _, port = self._endpoint()
        if port:
            return port, "rdzv_endpoint"
        from parc.model.targets import families

        ports = node_facts()["ports"]
        for t in self.launch_targets():
            for name in (t, *families(t, self.plan.mode, self.plan.target_settings(t), self.plan.targets)):
                s = self.plan.target_settings(name)
                if name == "sglang" and s.get("dist_port"):
                    return int(s["dist_port"]), "target sglang's dist_port"
                if name == "vllm" and s.get("executor") == "ray":
                    return ports["vllm_ray"], "the Ray head's port of the vllm launch"
                if name in ports:
                    return ports[name], f"the {name} launch's default"
        return ports["torchrun"], "torchrun's default"
