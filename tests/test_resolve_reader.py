"""The loader reads a spec's files through a reader: any object with real/exists/par_names/read."""
from __future__ import annotations

import os
from pathlib import Path

from parc.resolve import load
from parc.resolve.reader import ReadFailure

CLUSTER = 'cluster "pod" {\n  nodes = 2\n  gpus_per_node = 8\n  gpu = h100_sxm\n}\n'
SPEC = 'use "clusters/pod.par"\n\nmodel "m" { from = llama3_8b }\n\nmesh {\n  dp = auto\n  tp = 8\n}\n'


class Files:
    """Spec files held in memory, by absolute path."""

    def __init__(self, files: dict[str, str]):
        self.files = files
        self.read_paths: list[str] = []

    def real(self, path: Path) -> Path:
        return Path(os.path.normpath(os.path.abspath(path)))

    def exists(self, path: Path) -> bool:
        return str(path) in self.files

    def par_names(self, folder: Path) -> tuple[str, ...]:
        return tuple(Path(p).name for p in self.files if Path(p).parent == folder)

    def read(self, path: Path, within: Path | None = None) -> str:
        self.read_paths.append(str(path))
        if str(path) not in self.files:
            raise ReadFailure(path, "it is not there")
        return self.files[str(path)]


def test_a_reader_supplies_the_spec_and_its_imports():
    files = Files({"/v/specs/train.par": SPEC, "/v/specs/clusters/pod.par": CLUSTER})
    r = load("/v/specs/train.par", root="/v", reader=files)
    assert not r.diagnostics and r.plan.cluster.world == 16 and r.plan.mesh.dp == 2
    assert files.read_paths == ["/v/specs/train.par", "/v/specs/clusters/pod.par"]
    assert r.plan.source == "specs/train.par"


def test_a_missing_import_is_looked_up_through_the_reader():
    files = Files({"/v/specs/train.par": SPEC.replace("pod.par", "pdo.par"), "/v/specs/clusters/pod.par": CLUSTER})
    r = load("/v/specs/train.par", root="/v", reader=files)
    d = next(d for d in r.diagnostics if d.code == "P013")
    assert d.help == "did you mean `pod.par`?"
    assert "/v/specs/clusters/pdo.par" not in files.read_paths
