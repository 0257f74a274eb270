"""--verify proves something or fails: a gradient missing on one side fails it, and Adam passes on
correct code within the tolerance its normalised step allows."""
from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from support.specs import load, spec_text  # noqa: E402
from support.timing import scaled  # noqa: E402

from parc.runtime import reference as R  # noqa: E402
from parc.runtime import shrink  # noqa: E402
from parc.runtime.launch import Job, prepare_env, run_forked  # noqa: E402
from parc.runtime.options import Options  # noqa: E402

prepare_env()

pytestmark = pytest.mark.slow


def _drop_grad(name: str, rank: int):
    """A bug to catch: the gradient of ``name`` vanishes on ``rank`` during the backward."""
    def hook(rk):
        if rk.meshes.rank != rank:
            return
        for n, p in rk.named_parameters():
            if n == name:
                p.register_post_accumulate_grad_hook(lambda q: setattr(q, "grad", None))
    return hook


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify")
    jobs = {}
    # lr 0: the parameters never move, so only the gradient comparison can see the lost gradient
    pp = shrink.rehearse(load(tmp, "pp", spec_text(2, "pp = 2", schedule="pipeline = gpipe")))
    o = Options(steps=1, verify=True, optimizer="sgd", lr=0.0, timeout=60, hooks={"after_build": _drop_grad("norm.weight", 1)})
    jobs["lost-grad"] = Job(pp, o, R.compute(pp, 1, 0, "sgd", 0.0))
    tp = shrink.rehearse(load(tmp, "tp", spec_text(2, "tp = 2")))
    o = Options(steps=2, verify=True, optimizer="adam", timeout=60)
    jobs["adam"] = Job(tp, o, R.compute(tp, 2, 0, "adam", o.learning_rate(tp)))
    bad = R.compute(tp, 2, 1, "adam", o.learning_rate(tp))      # another seed: must fail
    jobs["adam-wrong"] = Job(tp, o, bad)
    got = run_forked(list(jobs.values()), deadline=time.time() + scaled(240))
    return dict(zip(jobs, got))


def test_a_gradient_missing_on_one_side_fails_the_proof(reports):
    v = reports["lost-grad"]["verify"]
    assert v["ran"] and v["passed"] is False, v
    assert any(m.startswith("norm.weight") for m in v["missing_grads"]), v


def test_adam_passes_on_correct_code_and_fails_on_a_wrong_reference(reports):
    v = reports["adam"]["verify"]
    assert v["passed"] is True, v
    assert v["max_loss_diff"] <= R.LOSS_ATOL
    assert reports["adam-wrong"]["verify"]["passed"] is False


def test_adam_tolerance_is_tight_where_the_gradient_is_large():
    g = torch.tensor([1.0, 1e-3, 0.0])
    tol = R.param_tolerance("adam", 1e-3, [g, g])
    assert tol[0] < 1e-6 + 2 * 1e-3 * 2 * (R.GRAD_ATOL + R.GRAD_RTOL) + 1e-12
    assert tol[2] == pytest.approx(1e-6 + 2 * 2e-3)        # a noise gradient may flip the step's sign
    assert R.param_tolerance("sgd", 0.05, [g]) == R.PARAM_ATOL
