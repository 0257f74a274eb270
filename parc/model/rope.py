"""The longest context each engine derives for a model, from its positions and RoPE scaling.

A Hugging Face config gives ``max_position_embeddings`` (parc's ``max_positions``) and, for a
model stretched beyond what it was trained on, ``rope_scaling`` (``rope_scaling``,
``rope_factor``, ``rope_original_positions``). The engines read the pair differently, each as
its ``[context]`` table in its target.toml says (``factor_for``: the scaling types whose factor
multiplies the positions; ``original_cancels``: whether an ``original_max_position_embeddings``
in ``rope_scaling`` means the positions are already scaled), so one function derives every
engine's limit and the rules, the launches and explain read it here:

* vLLM (``vllm/config/model.py`` ``_get_and_verify_max_len``, 0.33): the factor of linear and
  dynamic scaling multiplies the positions; llama3, longrope, yarn and DeepSeek's yarn leave
  them as the config states them (already scaled);
* SGLang (``sglang/srt/utils/hf_transformers/common.py`` ``get_context_length``, 0.5.23): the
  factor multiplies unless the scaling names its original positions or is llama3, and the
  Transformers config it loads names a yarn scaling's original positions always.

Llama 3.1's config (max_position_embeddings 131072, llama3 scaling of factor 8 from 8192) gives
131,072 in both; linear scaling of factor 4 over 4,096 positions gives 16,384 in vLLM, and in
SGLang unless the scaling names its original positions (then 4,096).
"""
from __future__ import annotations

from parc.model.plan import Model


def context_limit(m: Model, engine: str | None) -> int | None:
    """The longest context ``engine`` (a target name) derives for model ``m``: its positions,
    times the RoPE factor where that engine applies it; None where the model states no positions."""
    from parc.model.targets import context_rule

    if not m.max_positions:
        return None
    rule = context_rule(engine) if engine else {}
    if m.rope_scaling == "none" or not rule or m.rope_factor == 1.0:
        return m.max_positions
    if m.rope_scaling not in rule.get("factor_for", ()):
        return m.max_positions
    if rule.get("original_cancels") and m.rope_original_positions:
        return m.max_positions
    return int(m.max_positions * m.rope_factor)


def context_words(m: Model, engine: str | None) -> str:
    """How ``engine`` derives the limit, for messages: ``131,072 positions`` or ``32,768 positions ×
    yarn factor 4 = 131,072``."""
    limit = context_limit(m, engine)
    if limit is None:
        return "no stated positions"
    if limit == m.max_positions:
        scaled = (f", its {m.rope_scaling} RoPE scaling already counted" if m.rope_scaling != "none" and
                  m.rope_factor != 1.0 else "")
        return f"{m.max_positions:,} positions{scaled}"
    return f"{m.max_positions:,} positions × {m.rope_scaling} factor {m.rope_factor:g} = {limit:,}"
