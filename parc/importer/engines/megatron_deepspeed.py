"""Megatron-DeepSpeed's ``pretrain_*.py`` (a pretrain script given ``--deepspeed``, under
``torchrun``, ``python`` or the ``deepspeed`` launcher) read back into a spec for target
megatron_deepspeed: the fork's arguments through parc/targets/megatron_deepspeed/flags.toml with
Megatron-LM's reader (parc/importer/engines/megatron.py), whose rules the two share; the world from
torchrun's or the deepspeed launcher's sizes; the data parallel size as the fork derives it
(world / (tp · pp), megatron/arguments.py validate_args).

The vocabulary: NullTokenizer's is ``--vocab-size`` and its end-of-document token; a SentencePiece
or Hugging Face tokenizer's is the tokenizer file's, which the launch names but does not give: the
spec says so with an ``unknown(...)`` placeholder (``--model`` with a preset or a spec fills it).
The config ``--deepspeed_config`` names (written by the script or beside it) is read for what it
says beyond the arguments: parc writes its own from the plan, so a key it cannot write is listed."""
from __future__ import annotations

from parc.importer.argv import Opt, parse
from parc.importer.draft import Name, Placeholder
from parc.importer.engines import megatron
from parc.importer.engines.common import number

# ds_config.json keys the emitted config writes from the plan (parc/targets/deepspeed config)
WRITTEN = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16.enabled",
           "fp16.enabled", "zero_optimization.stage", "zero_optimization.overlap_comm",
           "zero_optimization.contiguous_gradients", "zero_optimization.reduce_bucket_size")
# DeepSpeed's own settings of the run's logging: no plan of parc's, left to DeepSpeed's defaults
LOGGING = ("steps_per_print", "wall_clock_breakdown")


class MegatronDeepSpeed(megatron.Megatron):
    target = "megatron_deepspeed"

    def read_null_vocab(self, o: Opt) -> None:
        self.late["vocab_size"] = o

    def _tokenizer(self) -> None:
        kind, model, size = (self.late.get(k) for k in ("tokenizer_type", "tokenizer_model", "vocab_size"))
        d = self.draft
        if kind is not None and kind.value == "NullTokenizer" and size is not None:
            n = number(size.value)
            if isinstance(n, int):
                d.set("model", "vocab", n + 1, f"{self.note(size)} and NullTokenizer's end-of-document token")
                self.wiring(kind, "parc writes NullTokenizer where the target block names no `tokenizer`")
                return
        if kind is not None and kind.value == "GPTSentencePieceTokenizer" and model is not None:
            self.direct(model, "target.tokenizer")
            self.wiring(kind, "parc writes it with `tokenizer`")
            d.set("model", "vocab", Placeholder(f"the vocabulary of {model.value or model.source()}"),
                  f"{self.note(model)}: the tokenizer file's, which the launch does not give")
            if size is not None:
                self.carry(size, "a vocabulary size beside a tokenizer file (the fork takes the file's)")
            return
        for o in (kind, model, size):
            if o is not None:
                self.carry(o, "a tokenizer parc's launch does not write (GPTSentencePieceTokenizer or NullTokenizer)")

    def world(self, la, facts: dict):
        """(nodes, GPUs a node) of a deepspeed launcher: --num_nodes and --num_gpus (a hostfile the
        launcher reads is the cluster's to say), its rendezvous left to parc's launch."""
        nodes, per = facts.get("nodes", (None, ""))[0], facts.get("gpus_per_node", (None, ""))[0]
        for o in parse("deepspeed", la.launcher_args)[0]:
            n = number(o.value) if o.values else None
            if o.what == "num_gpus" and isinstance(n, int):
                per = n
                facts["gpus_per_node"] = (n, f"{la.where()} --num_gpus {o.value}")
            elif o.what == "num_nodes" and isinstance(n, int):
                nodes = n
                facts["nodes"] = (n, f"{la.where()} --num_nodes {o.value}")
            elif o.what in ("hostfile", "master_addr", "master_port") or o.entry.get("plumbing"):
                self.wiring(o, "the deepspeed launcher's rendezvous: parc's launch writes it from the cluster")
            else:
                self.drop(o, "a deepspeed launcher option the megatron_deepspeed target has no key for")
        if nodes is None:
            nodes = 1
            facts["nodes"] = (1, f"{la.where()} deepspeed without --num_nodes: one node")
        if per is None:
            per = Placeholder("--num_gpus")
        return nodes, per

    def read_config(self, la) -> None:
        """What the ds_config.json --deepspeed_config names says beyond the arguments."""
        import json

        from parc.importer.engines.deepspeed import flatten
        from parc.importer.sources import read_beside

        o = self.seen.get("deepspeed_config")
        text = read_beside(la, o.value) if o is not None and o.value else None
        if o is None or text is None:
            if o is not None:
                self.report.notes.append(f"{self.note(o)}: the config is not where the script runs; parc writes "
                                         "its own ds_config.json from the plan's batch, ZeRO stage and precision")
            return
        try:
            data = json.loads(text)
        except ValueError:
            self.report.notes.append(f"{o.value}: not JSON: not read")
            return
        for key, v in flatten(data if isinstance(data, dict) else {}):
            if key in WRITTEN:
                self.report.wiring.append((f"{o.value} {key}", "parc writes it from the plan (the arguments state it)"))
            elif key in LOGGING:
                self.report.notes.append(f"{o.value} {key} = {v}: DeepSpeed's logging, left to its default")
            else:
                self.report.dropped.append((f"{o.value} {key}", "a ds_config.json key the config parc writes leaves out"))


def _launcher(r: MegatronDeepSpeed, la) -> None:
    """torchrun's options as Megatron-LM's reader takes them, and which runner starts the ranks."""
    if la.launcher == "torchrun":
        r.draft.target(r.target, "runner", Name("torchrun"), f"{la.where()} torchrun")
    megatron._launcher(r, la)
    r.read_config(la)


def deploy(ctx) -> str:
    """The spec of a Megatron-DeepSpeed launch; ``--model`` gives what the arguments do not (the
    vocabulary of a tokenizer file), from a preset or a spec's model block."""
    target = megatron.deploy(ctx, MegatronDeepSpeed, _launcher)
    if ctx.options.model:
        _given_model(ctx)
    return target


def _given_model(ctx) -> None:
    """--model PRESET: the preset's fields where the arguments leave a placeholder (the arguments'
    own values stay); --model SPEC: that spec's model block in place of the arguments'."""
    from parc.importer.deploy import model_block

    d = ctx.draft
    fields = d.blocks.get("model", {})
    for k in [k for k, e in fields.items() if isinstance(e.value, Placeholder)]:
        del fields[k]
    if model_block(ctx, None, "") and "from" in fields:     # a preset: `from` first, as fmt writes it
        d.blocks["model"] = {"from": fields.pop("from"), **fields}
