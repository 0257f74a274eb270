"""The training search's results, pinned: a change made for speed must leave every ranked plan,
its costs and the set of candidates exactly as they were.

The pinned search is DeepSeek-V3 on 32 nodes of the H800s its report trained on (DeepSeek-V3
technical report, arXiv:2412.19437, §3.1: NVLink 160 GB/s within a node, InfiniBand 50 GB/s per
GPU across), 4K sequences: small enough for the suite, large enough that the memory bound, every
ZeRO stage, DualPipe and the expert mesh all take part. Its golden file holds the counts, the top
plans as the search ranks them and a digest of every column in rank order. A change to the cost
model changes it on purpose: rewrite it with ``PARC_UPDATE_GOLDEN=1`` and read the diff.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from parc.model.plan import GPU, Cluster, Link
from parc.planner import search
from parc.planner import vector
from parc.planner.columns import Columns
from support.snapshot import assert_snapshot

H800 = """cluster "h800" {
  nodes         = 32
  gpus_per_node = 8
  gpu           = h800
  intra_node    = nvlink(160GB/s)
  inter_node    = infiniband(50GB/s)
}
"""


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory):
    path = tmp_path_factory.mktemp("h800") / "h800.par"
    path.write_text(H800)
    return search("deepseek_v3", str(path), "train", seq_len=4096, global_batch=1920, top=20)


def _digest(cols) -> str:
    h = hashlib.sha256()
    for k in sorted(cols):
        a = np.ascontiguousarray(cols[k])
        h.update(f"{k} {a.dtype} {len(a)}\n".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def test_deepseek_v3_search_is_pinned(deepseek):
    r = deepseek
    lines = [f"candidates evaluated {r.candidates_evaluated}, costed {r.costed}, fit {r.valid}",
             f"every column in rank order: sha256 {_digest(r.columns)}",
             "rank tp pp dp cp ep etp pipeline v mb m zero recompute sp: step_time memory tokens_per_second"]
    for c in r.plans:
        lines.append(f"{c.rank} {c.tp} {c.pp} {c.dp} {c.cp} {c.ep} {c.etp} {c.pipeline} {c.virtual_stages} "
                     f"{c.micro_batch} {c.microbatches} {c.zero} {c.recompute} {int(c.sequence_parallel)}: "
                     f"{c.step_time!r} {c.memory_total!r} {c.tokens_per_second!r}")
    assert len(r.plans) == 20
    assert_snapshot("planner/deepseek_v3_32x8_h800.txt", "\n".join(lines) + "\n")


def _small():
    gpu = GPU("h100_sxm", 85520809984, 989e12, 3350e9, 450e9, 64e9)
    return Cluster("h100", 2, 8, gpu, Link("nvlink", 450e9), Link("infiniband", 50e9))


def test_chunks_do_not_change_the_candidates(monkeypatch):
    """The bulk search costs its rows in chunks; with chunks of a few hundred rows (boundaries
    falling anywhere) it finds the same candidates with the same costs, in the same rank order."""
    whole = search("deepseek_moe_16b", _small(), "train", seq_len=4096, global_batch=64, top=5)
    monkeypatch.setattr(vector, "CHUNK", 331)
    chunked = search("deepseek_moe_16b", _small(), "train", seq_len=4096, global_batch=64, top=5)
    assert (chunked.candidates_evaluated, chunked.costed, chunked.valid) == (
        whole.candidates_evaluated, whole.costed, whole.valid)
    assert whole.valid > 10 * 331
    assert list(chunked.columns) == list(whole.columns)
    for k in whole.columns:
        assert np.array_equal(chunked.columns[k], whole.columns[k]), k
    assert [repr(c) for c in chunked.plans] == [repr(c) for c in whole.plans]


def test_columns_read_settings_through_their_options():
    """A setting column is its option table read at each candidate's option index; taking rows
    and reading one candidate agree with the arrays."""
    stored = {"lo": np.array([2, 0, 1, 2]), "step_time": np.array([1.5, 2.5, 3.5, 4.5])}
    cols = Columns(stored, {"pp": ("lo", np.array([1, 2, 4]))}, ["pp", "step_time"])
    assert list(cols) == ["pp", "step_time"] and len(cols) == 2 and "lo" not in cols
    assert cols["pp"].tolist() == [4, 1, 2, 4]
    sub = cols.take(np.array([3, 1]))
    assert sub["pp"].tolist() == [4, 1] and sub["step_time"].tolist() == [4.5, 2.5]
    assert cols.row(2) == {"pp": 2, "step_time": 3.5}
    assert cols.get("missing") is None
    with pytest.raises(KeyError):
        cols["lo"]
