"""The Python API on a user's own module: placement patterns from the spec, ZeRO, a pipeline."""
from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
torch.set_num_threads(1)
from torch import nn  # noqa: E402

from parc.api import load_plan  # noqa: E402
from parc.runtime.launch import RunFailed, prepare_env, run_function  # noqa: E402
from support.timing import scaled  # noqa: E402

prepare_env()

SPEC = """
model "mine" {{
  layers = 4
  hidden = 1024
  heads = 16
  kv_heads = 8
  ffn_hidden = 4096
  vocab = 32000
  seq_len = 2048
}}
cluster "box" {{
  nodes = 1
  gpus_per_node = 4
  gpu = h100_sxm
  intra_node = nvlink(450GB/s)
}}
mesh {{ {mesh} }}
placement {{
  "blocks.*.up"   = colwise(tp)
  "blocks.*.down" = rowwise(tp)
  "norm"          = replicate
}}
schedule {{
  micro_batch  = 1
  global_batch = 8
  {schedule}
}}
train {{
  optimizer = sgd
  zero      = {zero}
}}
"""


class Block(nn.Module):
    def __init__(self, h=16, f=32):
        super().__init__()
        self.up = nn.Linear(h, f)
        self.down = nn.Linear(f, h)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Mine(nn.Module):
    def __init__(self, n=2):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(n)])
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.norm(x)


def data(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)


def train(model, steps, params_fn=None, dp=1, dp_rank=0, session=None):
    opt = torch.optim.SGD(session.owned(model.parameters()) if session else model.parameters(), lr=0.1)
    for step in range(steps):
        x, y = data(step)
        x, y = x.chunk(dp)[dp_rank], y.chunk(dp)[dp_rank]
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        if session:
            session.sync_gradients()
        opt.step()
        if session:
            session.after_step()
        opt.zero_grad()


def full_state(model):
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
            for n, p in model.named_parameters()}


@pytest.mark.parametrize("mesh,zero", [("dp = 2\n  tp = 2", 3), ("dp = 2\n  tp = 2", 1), ("dp = 4", 2)])
def test_user_module_with_placement_patterns(tmp_path, mesh, zero):
    spec = tmp_path / "mine.par"
    spec.write_text(SPEC.format(mesh=mesh, zero=zero, schedule=""))
    plan = load_plan(spec, root=tmp_path)
    torch.manual_seed(0)
    ref = Mine()
    init = {k: v.clone() for k, v in ref.state_dict().items()}
    train(ref, 2)
    want = full_state(ref)

    def rank_fn(rank):
        from torch.distributed.tensor import DTensor

        from parc.runtime.api import Session

        s = Session(plan)
        m = Mine()
        m.load_state_dict(init)
        m = s.parallelize(m)
        kinds = {n: type(p).__name__ for n, p in m.named_parameters()}
        up = m.blocks[0].up.weight
        local_rows = (up._local_tensor if isinstance(up, DTensor) else up).shape[0]
        train(m, 2, dp=s.meshes.size("dp"), dp_rank=s.coords["dp"], session=s)
        got = full_state(m)
        return {"diff": max(float((got[n] - want[n]).abs().max()) for n in want),
                "kinds": kinds, "up_rows": local_rows}

    res = run_function(rank_fn, 4, deadline=time.time() + scaled(120))
    for r in res:
        assert r["diff"] < 1e-6
        assert r["kinds"]["blocks.0.up.weight"] == ("DTensor" if "tp" in mesh or zero == 3 else "Parameter")
        # colwise over tp = 2 (32 -> 16 rows), then FSDP over dp = 2 for zero 3 (-> 8)
        tp = 2 if "tp" in mesh else 1
        assert r["up_rows"] == 32 // tp // (2 if zero == 3 else 1)


def test_session_refuses_a_world_it_does_not_have(tmp_path):
    spec = tmp_path / "mine.par"
    spec.write_text(SPEC.format(mesh="dp = 2\n  tp = 2", zero=0, schedule=""))
    plan = load_plan(spec, root=tmp_path)

    def rank_fn(rank):
        from parc.runtime.api import Session

        Session(plan)

    with pytest.raises(RunFailed, match="needs 4 processes but this world has 2"):
        run_function(rank_fn, 2, deadline=time.time() + scaled(60))


def test_user_stages_in_the_plans_pipeline(tmp_path):
    spec = tmp_path / "pipe.par"
    spec.write_text(SPEC.format(mesh="pp = 2\n  dp = 2", zero=0, schedule="pipeline = 1f1b"))
    plan = load_plan(spec, root=tmp_path)
    torch.manual_seed(0)
    ref = nn.Sequential(*[Block() for _ in range(4)])
    init = {k: v.clone() for k, v in ref.state_dict().items()}
    x, y = data(0)
    loss = ((ref(x) - y) ** 2).mean()
    loss.backward()
    want = {n: p.grad.clone() for n, p in ref.named_parameters()}

    def rank_fn(rank):
        from parc.runtime.api import Session

        s = Session(plan)
        lay = s.stages()
        full = nn.Sequential(*[Block() for _ in range(4)])
        full.load_state_dict(init)
        mods = {st: nn.Sequential(*[full[i] for i in lay.layers[st]]) for st in lay.stage_ids}
        s.parallelize(mods[lay.stage_ids[0]])
        log = []
        sched = s.schedule(mods, lambda out, tgt: ((out - tgt) ** 2).mean(), log)
        dp = s.coords["dp"]
        xs, ys = x.chunk(2)[dp], y.chunk(2)[dp]
        if lay.first:
            sched.step(xs)
        else:
            sched.step(target=ys)
        s.sync_gradients()
        diffs = []
        for st in lay.stage_ids:
            for n, p in mods[st].named_parameters():
                i, rest = n.split(".", 1)
                ref_name = f"{lay.layers[st][int(i)]}.{rest}"
                diffs.append(float((p.grad - want[ref_name]).abs().max()))
        return {"diff": max(diffs), "actions": [str(a) for a in log]}

    res = run_function(rank_fn, 4, deadline=time.time() + scaled(120))
    assert all(r["diff"] < 1e-6 for r in res)
    assert res[0]["actions"][:2] == ["0F0", "0F1"]


def test_a_spec_is_resolved_above_the_runtime(tmp_path):
    """The runtime reads plans, not specs: Session names parc.api.session for a .par file, and
    session() checks the spec before any rank is touched (a mesh larger than the cluster)."""
    from parc.api import session
    from parc.runtime.api import Session

    spec = tmp_path / "mine.par"
    spec.write_text(SPEC.format(mesh="tp = 8", zero=0, schedule=""))
    with pytest.raises(TypeError, match=r"parc\.api\.session"):
        Session(str(spec))
    with pytest.raises(ValueError, match="the spec has errors"):
        session(spec, root=tmp_path)
