"""Checkpoint folders are data: nothing in them runs, and a bad one is refused in one line before
any rank starts."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

torch = pytest.importorskip("torch")

from support.specs import MOE, load, spec_text  # noqa: E402
from support.timing import scaled  # noqa: E402

from parc.runtime import shrink  # noqa: E402
from parc.runtime.launch import prepare_env  # noqa: E402
from parc.runtime.options import Options  # noqa: E402

prepare_env()

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
       "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def parc(*args, timeout=240):
    timeout = scaled(timeout)
    return subprocess.run([sys.executable, "-m", "parc", *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout)


class _Plant:
    """Unpickling this calls exec on code that writes a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def _saved(tmp_path, name: str, text: str) -> tuple:
    """A rehearsal plan and a checkpoint of its model written by DCP in one process."""
    import torch.distributed.checkpoint as dcp

    from parc.runtime.model import Config, Transformer

    plan = shrink.rehearse(load(tmp_path, name, text))
    model = Transformer(Config.from_model(plan.model))
    model.init_weights(0)
    ck = tmp_path / f"ck-{name}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(ck), no_dist=True)
    return plan, ck


def test_a_crafted_metadata_file_runs_nothing(tmp_path):
    spec = tmp_path / "s.par"
    spec.write_text(spec_text(2, "tp = 2"))
    ck = tmp_path / "ck"
    ck.mkdir()
    marker = tmp_path / "marker"
    (ck / ".metadata").write_bytes(pickle.dumps(_Plant(marker)))
    r = parc("run", str(spec), "--rehearse", "--steps", "1", "--checkpoint", str(ck))
    assert not marker.exists(), "unpickling the checkpoint's metadata ran code"
    assert r.returncode == 2, r.stderr
    assert "refused" in r.stderr and "builtins.exec" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "step 1" not in r.stdout


def test_bad_checkpoints_are_refused_in_one_line_before_any_rank_starts(tmp_path):
    from parc.runtime.run import run_plan

    text = spec_text(2, "tp = 2")
    plan, good = _saved(tmp_path, "a", text)
    shard = next(good.glob("*.distcp"))

    def refused(ck, *words):
        with pytest.raises(Exception) as err:
            run_plan(plan, Options(steps=1, optimizer="sgd", checkpoint=str(ck)), rehearse=True, progress=False,
                     deadline_s=scaled(120))
        msg = str(err.value)
        assert "\n" not in msg.strip(), msg
        for w in words:
            assert w in msg, msg
        return msg

    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / ".metadata").write_bytes(b"\x80\x04not a pickle at all")
    refused(garbage, "not torch.distributed.checkpoint metadata")

    import shutil

    truncated = tmp_path / "truncated"
    shutil.copytree(good, truncated)
    t = truncated / shard.name
    t.write_bytes(t.read_bytes()[: t.stat().st_size // 2])
    refused(truncated, "truncated", shard.name)

    missing = tmp_path / "missing"
    shutil.copytree(good, missing)
    (missing / shard.name).unlink()
    refused(missing, "missing", shard.name)

    _, other = _saved(tmp_path, "b", spec_text(2, "tp = 2", model=MOE))
    refused(other, "another model")


def test_checkpoint_naming_a_file_is_refused_before_any_step(tmp_path):
    spec = tmp_path / "s.par"
    spec.write_text(spec_text(2, "dp = 2"))
    f = tmp_path / "ck.bin"
    f.write_text("x")
    r = parc("run", str(spec), "--rehearse", "--steps", "1", "--checkpoint", str(f))
    assert r.returncode == 2
    assert "which is a file" in r.stderr and "step 1" not in r.stdout
    assert f.read_text() == "x"


def test_a_shard_that_is_a_link_is_refused_for_reading_and_writing(tmp_path):
    # a folder whose shard names link elsewhere: DCP would read the linked file, and on save
    # open the link and overwrite the file it points to, outside the folder
    spec = tmp_path / "s.par"
    spec.write_text(spec_text(2, "dp = 2"))
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    ck = tmp_path / "ck"
    ck.mkdir()
    for rank in range(2):
        (ck / f"__{rank}_0.distcp").symlink_to(outside)
    r = parc("run", str(spec), "--rehearse", "--steps", "1", "--checkpoint", str(ck))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "__0_0.distcp" in r.stderr and "link" in r.stderr and "step 1" not in r.stdout
    assert outside.read_text() == "keep me"

    # a checkpoint whose shard was swapped for a link to a copy of itself is refused on read
    from parc.runtime import checkpoint as CK
    from parc.runtime.model import Config

    plan, good = _saved(tmp_path, "a", spec_text(2, "tp = 2"))
    shard = next(good.glob("*.distcp"))
    copy = tmp_path / "copy.distcp"
    copy.write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(copy)
    with pytest.raises(CK.CheckpointError, match="link"):
        CK.validate(str(good), Config.from_model(plan.model))
