"""The single-process reference: the same model, the same data, the same optimizer, one process.

A parallel run is right when its per-step losses, its gradients and its parameters after the
last step equal these to floating-point tolerance.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from parc.model.plan import Plan
from parc.runtime.model import Config, Transformer, loss_fn
from parc.runtime.options import DEFAULT_LR  # noqa: F401 - re-exported

LOSS_ATOL = 1e-5
GRAD_ATOL, GRAD_RTOL = 1e-5, 1e-4
PARAM_ATOL = 1e-6
ADAM_EPS = 1e-8          # torch's default eps for Adam and AdamW, which make_optimizer keeps


def param_tolerance(optimizer: str, lr: float, grads):
    """How far a parameter may be from the reference's after the last step.

    SGD moves a parameter by lr·gradient, so gradients within their tolerance give parameters
    within PARAM_ATOL. Adam moves each element by about lr·g/(|g|+eps) whatever the gradient's
    size: a gradient that differs by δ (the rounding of a different reduction order, bounded
    by the gradient check's atol + rtol·|g|) moves the step by up to lr·2δ/(|g|+eps), at most
    2·lr (the step's sign flipping on a gradient that is rounding noise). The tolerance is the
    sum of that over the steps, per element, plus PARAM_ATOL: tight where the reference
    gradient is large, loose only where it is noise. Losses and gradients keep their own
    tolerances at every step, so a wrong layout still fails there."""
    if optimizer not in ("adam", "adamw"):
        return PARAM_ATOL
    tol = None
    for g in grads:
        if g is None:
            continue
        a = g.abs()
        step = lr * torch.clamp(2 * (GRAD_ATOL + GRAD_RTOL * a) / (a + ADAM_EPS), max=2.0)
        tol = step if tol is None else tol + step
    return PARAM_ATOL if tol is None else tol + PARAM_ATOL



def global_batch(plan: Plan, step: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic next-token data for a step: (global_batch, seq_len) inputs and targets."""
    g = torch.Generator().manual_seed(seed * 7919 + step)
    m, s = plan.model, plan.schedule
    toks = torch.randint(0, m.vocab, (s.global_batch, m.seq_len + 1), generator=g)
    return toks[:, :-1].to(device), toks[:, 1:].to(device)


def local_batch(plan: Plan, x: torch.Tensor, dp_rank: int, cp_rank: int) -> torch.Tensor:
    """This rank's rows (by dp coordinate) and sequence chunks (head-tail by cp coordinate)."""
    dp, cp = plan.mesh.dp, plan.mesh.cp
    x = x.chunk(dp, dim=0)[dp_rank]
    if cp > 1:
        parts = x.chunk(2 * cp, dim=1)
        x = torch.cat([parts[cp_rank], parts[2 * cp - 1 - cp_rank]], dim=1)
    return x.contiguous()


def make_optimizer(name: str, params, lr: float):
    params = list(params)
    if not params:
        return None
    # the fused multi-tensor path on GPUs with plain tensors; elsewhere one tensor at a time
    # (DTensor parameters of different meshes cannot share a foreach kernel)
    fast = all(p.is_cuda and type(p.data) is torch.Tensor for p in params)
    foreach = None if fast else False
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, foreach=foreach)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, foreach=foreach)
    return torch.optim.Adam(params, lr=lr, foreach=foreach)


@dataclass
class Reference:
    losses: list[float] = field(default_factory=list)
    grads: list[dict[str, torch.Tensor]] = field(default_factory=list)    # per step
    params: dict[str, torch.Tensor] = field(default_factory=dict)         # after the last step
    initial: dict[str, torch.Tensor] = field(default_factory=dict)


def compute(plan: Plan, steps: int, seed: int, optimizer: str, lr: float,
            checkpoint: str | None = None, start_step: int = 0) -> Reference:
    """``checkpoint``: start from the weights saved there (under any plan), with the data of
    steps ``start_step + 1`` onwards, as a resumed parallel run does."""
    cfg = Config.from_model(plan.model)
    model = Transformer(cfg)
    model.init_weights(seed)
    if checkpoint:
        import warnings

        import torch.distributed.checkpoint as dcp

        from parc.runtime.checkpoint import CheckpointError, SafeReader, one_line

        state = model.state_dict()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                dcp.load({"model": state}, checkpoint_id=checkpoint, no_dist=True,
                         storage_reader=SafeReader(checkpoint))
            except CheckpointError:
                raise
            except Exception as e:  # noqa: BLE001 - one line, not DCP's tracebacks
                raise CheckpointError(one_line(checkpoint, e)) from None
        model.load_state_dict(state)
    ref = Reference(initial={n: p.detach().clone() for n, p in model.named_parameters()})
    train = plan.mode == "train"
    opt = make_optimizer(optimizer, model.parameters(), lr) if train else None
    m = plan.schedule.microbatches or 1
    for step in range(start_step + 1, start_step + steps + 1):
        x, y = global_batch(plan, step, seed)
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        # same grouping as the parallel run: per-microbatch means, averaged over dp·microbatches
        chunks = plan.mesh.dp * m
        total = 0.0
        with torch.set_grad_enabled(train):
            for xc, yc in zip(x.chunk(chunks), y.chunk(chunks)):
                loss = loss_fn(model(xc), yc) / chunks
                if train:
                    loss.backward()
                total += loss.item()
        ref.losses.append(total)
        if train:
            ref.grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters()
                              if p.grad is not None})
            opt.step()
    ref.params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return ref


def reference_name(name: str, tied: bool) -> str:
    """The reference parameter a parallel run's parameter compares with (a tied head that is its
    stage's own copy compares with the embedding)."""
    return "tok_embeddings.weight" if tied and name == "output.weight" else name
