"""Running the topology tools on this machine: ``nvidia-smi topo -m`` (or ``rocm-smi
--showtopo``) and the GPU's name, behind one function each so that tests need no GPU."""
from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from parc.topo.read import TopoError

TOPO = {False: ["nvidia-smi", "topo", "-m"], True: ["rocm-smi", "--showtopo"]}
NAME = {False: ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
        True: ["rocm-smi", "--showproductname"]}


def run_tool(cmd: list[str], timeout: float = 60) -> str:
    """The standard output of ``cmd``; TopoError when the tool is absent or fails."""
    if shutil.which(cmd[0]) is None:
        raise TopoError(f"`{cmd[0]}` is not on this machine's PATH, so parc cannot read the topology here: "
                        f"run `{' '.join(cmd)} > topo.txt` on a GPU node and give parc topo that file")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TopoError(f"`{' '.join(cmd)}` failed: {e}") from None
    if p.returncode != 0:
        raise TopoError(f"`{' '.join(cmd)}` exited with status {p.returncode}: "
                        f"{(p.stderr or p.stdout).strip()[:300]}")
    return p.stdout


@lru_cache(maxsize=1)
def gpu_names() -> dict[str, str]:
    """Each name `nvidia-smi` and `rocm-smi` print (a substring) and its GPU preset; longer first."""
    import tomllib

    return tomllib.loads((Path(__file__).parent / "gpu_names.toml").read_text(encoding="utf-8"))


def preset_for(name: str) -> str | None:
    """The GPU preset of a name the tools print (``NVIDIA H100 80GB HBM3`` -> ``h100_sxm``)."""
    return next((p for key, p in gpu_names().items() if key.lower() in name.lower()), None)


def gpu_preset(amd: bool, run=run_tool) -> str | None:
    """The preset of this machine's first GPU, or None where the name is not one parc knows."""
    try:
        out = run(NAME[amd])
    except TopoError:
        return None
    return next((p for ln in out.splitlines() if ln.strip() for p in [preset_for(ln)] if p), None)
