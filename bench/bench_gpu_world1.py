"""`parc run` at world 1 on a GPU against the same model in plain PyTorch eager: tokens/s.

Both sides train parc's reference decoder (a ~1B Llama-style model: RMSNorm, RoPE, GQA through
SDPA — flash attention on CUDA —, SwiGLU) at its real size with bf16 autocast over fp32 weights,
AdamW, the same batch, microbatching and data. The parc side is the whole runtime path of a
non-rehearsal run (process group, mesh, placements, the training step, gradient sync, loss
reduction, report); the eager side is a bare loop over the same module. The ratio is the
runtime's overhead.

Run on a machine with one CUDA GPU: python bench/bench_gpu_world1.py [--steps 12] [--warmup 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPEC = """
# ~1.2B-parameter Llama-style model on one GPU
model "llama-1b" {{
  layers     = 16
  hidden     = 2048
  heads      = 32
  kv_heads   = 8
  ffn_hidden = 8192
  vocab      = 128256
  seq_len    = {seq}
  tied_embeddings = true
}}
cluster "one" {{
  nodes         = 1
  gpus_per_node = 1
  gpu           = h100_sxm
}}
mesh {{ dp = 1 }}
schedule {{
  micro_batch  = {mb}
  global_batch = {gb}
}}
train {{
  optimizer = adamw
  precision = bf16
  zero      = 0
}}
"""


def eager(plan, steps: int, warmup: int, seed: int) -> tuple[list[float], int]:
    import torch

    from parc.runtime.model import Config, Transformer, loss_fn
    from parc.runtime.reference import global_batch

    cfg = Config.from_model(plan.model)
    model = Transformer(cfg)
    model.init_weights(seed)
    model = model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n = plan.schedule.microbatches
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(1, steps + warmup + 1):
        x, y = global_batch(plan, step, seed)
        x, y = x.cuda(), y.cuda()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            for xc, yc in zip(x.chunk(n), y.chunk(n)):
                (loss_fn(model(xc), yc) / n).backward()
        opt.step()
        torch.cuda.synchronize()
        if step > warmup:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated()
    del model, opt
    torch.cuda.empty_cache()
    return times, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--global-batch", type=int, default=8)
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here: run this on a GPU machine")
        raise SystemExit(2)
    from parc.api import load_plan
    from parc.runtime.options import Options
    from parc.runtime.run import run_plan

    with tempfile.TemporaryDirectory() as d:
        spec = Path(d) / "llama-1b.par"
        spec.write_text(SPEC.format(seq=args.seq, mb=args.micro_batch, gb=args.global_batch))
        plan = load_plan(spec, root=d)
    tokens = plan.schedule.global_batch * plan.model.seq_len
    print(f"model: {plan.model.params / 1e9:.2f}B params, {tokens} tokens/step "
          f"({plan.schedule.global_batch} × {plan.model.seq_len}, {plan.schedule.microbatches} microbatches), "
          f"{torch.cuda.get_device_name()}")

    eager_times, eager_peak = eager(plan, args.steps, args.warmup, 0)

    torch.cuda.reset_peak_memory_stats()
    opts = Options(steps=args.steps + args.warmup, seed=0, lr=1e-4, device="cuda")
    rep = run_plan(plan, opts, rehearse=False, progress=False)
    parc_times = [s["seconds"] for s in rep["steps"][args.warmup:]]
    parc_peak = rep["ranks"][0]["peak_memory_bytes"]

    e, p = statistics.median(eager_times), statistics.median(parc_times)
    print(f"  plain eager  {tokens / e:10.0f} tokens/s   {e * 1000:7.1f} ms/step   peak {eager_peak / 2**30:5.1f} GiB")
    print(f"  parc run     {tokens / p:10.0f} tokens/s   {p * 1000:7.1f} ms/step   peak {parc_peak / 2**30:5.1f} GiB")
    print(f"  parc / eager {e / p:10.3f} (throughput ratio; 1.0 = no overhead)")
    print(f"  losses: parc {[round(s['loss'], 4) for s in rep['steps'][:3]]}")


if __name__ == "__main__":
    main()
