"""Checks between a target block's keys and the rest of the spec, made while the spec is read:

* P025: an option list (``extra_args``) repeats an option that a key of the same block sets. The
  options each key sets are the target's flags.toml entries whose ``key`` names it
  (``target.tokenizer``: ``--tokenizer-type`` and ``--tokenizer-model``; ``target.attention_backend``:
  ``--attention-backend``); argparse would take whichever comes last, so the launch would run
  another value than the one the spec states and parc checked.
* P026: Megatron-LM's ``attention_backend`` contradicts the train block's ``flash_attention``,
  from which parc counts the attention's memory and time: ``unfused`` materialises the score
  matrix (``flash_attention = false``), ``flash``, ``fused`` and ``auto`` do not.
* P028: Megatron-FSDP's buffer keys against the train block: ``fsdp_double_buffer`` without
  Megatron-FSDP (``zero = 3``), which Megatron-LM's other data-parallel paths never read, and
  ``fsdp_double_buffer = false`` beside ``nccl_ub = true`` under it, which Megatron-LM overrides.
  Either way parc would count other buffers than the launch holds.
* P029: ``force_load_balancing`` on a model without experts: there is no router to force."""
from __future__ import annotations

from parc.language.diagnostics import Related

# the option lists of a target block: further command-line options, passed as given
OPTION_LISTS = ("extra_args",)
# Megatron-LM's attention backends that materialise the attention scores (AttnBackend.unfused)
UNFUSED = ("unfused",)


def options_of_keys(target: str, given: set[str]) -> dict[str, str]:
    """Each option (as flags.toml spells it, in any release) that a key in ``given`` sets -> the key."""
    from parc.model.targets import flag_table

    out = {}
    for entry in flag_table(target).values():
        keys = entry.get("key") or []
        for k in keys if isinstance(keys, list) else [keys]:
            if k.startswith("target.") and k[len("target."):] in given:
                out.update({n["name"]: k[len("target."):] for n in entry["names"]})
    return out


def repeated_options(r, name: str, settings: dict) -> None:
    """P025 for every word of the block's option lists that one of its keys already sets."""
    owned = options_of_keys(name, set(settings))
    for lk in OPTION_LISTS:
        for i, word in enumerate(settings.get(lk) or []):
            option = str(word).split("=", 1)[0]
            key = owned.get(option)
            if key is None:
                continue
            r.err("P025", f"`{lk}` gives {option}, which `{key}` of target {name} already sets: the program "
                          "would take whichever comes last, not necessarily the value parc checked",
                  r.spans.get(f"target.{name}.{lk}.value.{i}") or r.spans[f"target.{name}.{lk}"],
                  help=f"remove {option} (and its value) from `{lk}`, or remove `{key}`",
                  related=[Related(r.spans[f"target.{name}.{key}"], f"`{key}` set here")])


def attention_backend_conflict(r, targets: dict, train) -> None:
    """P026 where target megatron's attention_backend and the train block's flash_attention
    describe different attention kernels."""
    t = targets.get("megatron") if targets else None
    backend = t.settings.get("attention_backend") if t else None
    if backend is None or train is None or (backend in UNFUSED) == (not train.flash_attention):
        return
    if backend in UNFUSED:
        what = ("materialises the attention scores, but the train block counts a fused kernel "
                "(flash_attention = true, the default)")
        fix = "set `flash_attention = false` in train, or choose a fused backend (flash, fused, auto)"
    else:
        what = ("is a fused kernel, but the train block counts materialised attention scores "
                "(flash_attention = false)")
        fix = "use `attention_backend = unfused`, or remove `flash_attention = false` from train"
    related = [Related(r.spans["train.flash_attention"], "flash_attention set here")] \
        if "train.flash_attention" in r.spans else []
    r.err("P026", f"attention_backend = {backend} {what}: parc would check the memory and time of "
                  "another attention than Megatron-LM runs", r.spans["target.megatron.attention_backend"],
          help=fix, related=related)


def fsdp_buffer_conflict(r, targets: dict, train) -> None:
    """P028 where target megatron's fsdp_double_buffer contradicts what Megatron-LM 0.19.2 runs:
    the double buffer is Megatron-FSDP's alone (DistributedDataParallelConfig.fsdp_double_buffer,
    read by megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py), and with
    --use-nccl-ub validate_args turns it on (megatron/training/arguments.py)."""
    t = targets.get("megatron") if targets else None
    s = t.settings if t else {}
    if train is None or "fsdp_double_buffer" not in s:
        return
    at = r.spans["target.megatron.fsdp_double_buffer"]
    zero = [Related(r.spans["train.zero"], f"zero = {train.zero}")] if "train.zero" in r.spans else []
    if s["fsdp_double_buffer"] and train.zero < 3:
        r.err("P028", f"`fsdp_double_buffer = true` with zero = {train.zero}: the double buffer is Megatron-FSDP's "
                      "(zero = 3), and Megatron-LM's distributed optimizer and DDP never read --fsdp-double-buffer, "
                      "so parc would count buffers the launch does not hold (Megatron-LM itself starts and ignores "
                      "it; parc is stricter)", at,
              help="set `zero = 3` (Megatron-FSDP), or remove `fsdp_double_buffer`", related=zero)
    elif not s["fsdp_double_buffer"] and s.get("nccl_ub") and train.zero >= 3:
        r.err("P028", "`fsdp_double_buffer = false` with `nccl_ub = true` under Megatron-FSDP (zero = 3): Megatron-LM "
                      "turns the double buffer on for NCCL user buffers (validate_args; \"NCCL UB is only supported "
                      "with FSDP double buffer\"), so the launch holds the buffers the spec says it does not "
                      "(Megatron-LM runs it; parc is stricter and counts them either way)", at,
              help="remove `fsdp_double_buffer = false`, or remove `nccl_ub`",
              related=[Related(r.spans["target.megatron.nccl_ub"], "nccl_ub set here")])


def force_balance_fault(r, targets: dict, model) -> None:
    """P029 where target megatron forces the expert load of a model without experts."""
    t = targets.get("megatron") if targets else None
    if not (t and t.settings.get("force_load_balancing")) or model is None or model.is_moe:
        return
    r.err("P029", f"`force_load_balancing = true` on model \"{model.name}\", which has no experts: there is no "
                  "router whose load to force (Megatron-LM builds none and ignores --moe-router-force-load-balancing; parc is "
                  "stricter)", r.spans["target.megatron.force_load_balancing"],
          help="remove `force_load_balancing`")
