"""How a checkpoint stores its weights (``model.checkpoint_format``), read from
``data/checkpoints.toml``: the bits of each quantized part and their scales, the GEMM dtype the
format implies, and the quantization method each serving engine detects from it.

The weight bytes of a plan come from here through :func:`parc.cost.params.part_weight_bytes`;
the serving targets' ``--quantization`` and its rule (P619) through :func:`storage` and
:func:`engine_method`."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "checkpoints.toml"
ONLINE_FP8 = "online_fp8"          # a 16-bit checkpoint the engine quantizes to FP8 at load


@lru_cache(maxsize=1)
def table() -> dict[str, dict]:
    import tomllib

    with open(DATA, "rb") as f:
        return dict(tomllib.load(f))


def formats() -> tuple[str, ...]:
    """The values ``checkpoint_format`` takes (every entry but the engine's own online FP8)."""
    return tuple(k for k in table() if k != ONLINE_FP8)


def is_quantized(fmt: str) -> bool:
    """Whether a checkpoint format stores some weights below 16 bits."""
    return table()[fmt]["bits"] < 16


def gemm_dtype(fmt: str) -> str:
    """The dtype a quantized format's GEMMs run in (``fp8``), or "" (dequantized in the kernel)."""
    return table()[fmt].get("gemm", "")


def storage(m) -> str:
    """The entry of ``checkpoints.toml`` that describes how the engine holds the weights of
    ``m``: a quantized checkpoint's format; for a 16- or 32-bit checkpoint the dtype the engine
    casts it to, or ``online_fp8`` with ``dtype = fp8`` (the engine quantizes it at load)."""
    fmt = m.checkpoint_format
    if is_quantized(fmt):
        return fmt
    return ONLINE_FP8 if m.dtype == "fp8" else m.dtype


def load_quantization(m) -> str | None:
    """The ``--quantization`` a serving engine needs to run model ``m`` as planned: ``fp8`` for a
    16-bit checkpoint served with ``dtype = fp8`` (quantized at load), else none: a quantized
    checkpoint's method is read from its own quantization_config, and SGLang's DeepSeek guide
    says not to pass it for the FP8 checkpoint."""
    return "fp8" if storage(m) == ONLINE_FP8 else None


def precisions(dtype: str | None, fmt: str | None) -> dict[str, str]:
    """``{dtype, checkpoint_format}`` of a model block: each as given, else derived from the other
    (:func:`default_dtype`, :func:`default_format`); bf16 when neither is given."""
    fmt = fmt or default_format(dtype or "bf16")
    return {"dtype": dtype or default_dtype(fmt), "checkpoint_format": fmt}


def default_format(dtype: str) -> str:
    """The checkpoint format a model block that names none has: its dtype's 16 or 32 bits (bf16
    for an FP8 model: a 16-bit checkpoint quantized at load)."""
    return dtype if dtype in ("bf16", "fp16", "fp32") else "bf16"


def default_dtype(fmt: str) -> str:
    """The dtype a model block that names none runs its GEMMs in: FP8 for an FP8 checkpoint (the
    engines run its GEMMs in FP8, they do not dequantize it), else the checkpoint's 16 or 32 bits,
    bf16 for a 4-bit one (dequantized in the kernel, 16-bit activations)."""
    if gemm_dtype(fmt) == "fp8":
        return "fp8"
    return fmt if fmt in ("bf16", "fp16", "fp32") else "bf16"


def auto_dtype(fmt: str, engine: str) -> str:
    """The dtype ``engine``'s ``--dtype auto`` runs a checkpoint of ``fmt`` in: a 16-bit
    checkpoint's own, a 32-bit one's per engine (``<engine>_auto``), bf16 for a quantized one (the
    torch_dtype its config.json names)."""
    e = table()[fmt]
    return e.get(f"{engine}_auto") or (fmt if fmt in ("bf16", "fp16") else "bf16")


def engine_dtype(m, engine: str, stated: bool = False) -> str | None:
    """The ``--dtype`` (bf16, fp16, fp32) ``engine`` is given to run model ``m`` as planned: the
    spec's own 16- or 32-bit ``dtype`` (``stated``), else only where the engine's ``auto`` would
    run another; None where auto runs it (the activations of an FP8 model are the checkpoint's 16
    bits, which auto keeps)."""
    want = m.dtype if m.dtype in ("bf16", "fp16", "fp32") else None
    if stated and want:
        return want
    auto = auto_dtype(m.checkpoint_format, engine)
    return None if (want or auto) == auto else want


def bytes_per_param(fmt: str, part: str, row: int, elem16: float = 2.0) -> float:
    """Bytes one parameter of ``part`` takes in format ``fmt``: its bits plus its share of a
    scale (``row``: the elements of a row, for formats with one scale per row), or ``elem16``
    (the 16-bit bytes) for a part the format leaves unquantized."""
    e = table()[fmt]
    if e["bits"] >= 16 or part not in e.get("parts", ()):
        return float(e["bits"] // 8) if e["bits"] >= 16 else elem16
    group = e.get("group", "tensor")
    share = 0.0 if group == "tensor" else e.get("scale", 0) / (row if group == "row" else group)
    return e["bits"] / 8 + share


def expert_padding(fmt: str, engine: str, family: str) -> tuple[int, int] | None:
    """(intermediate, hidden): the multiples ``engine``'s MoE kernels round a routed expert of
    format ``fmt`` up to on a GPU of ``family`` (``sm90``, ``sm100``, ``default``); None where
    the format is held as stored."""
    pad = table()[fmt].get("pad", {}).get(engine)
    if not pad:
        return None
    a = pad.get(family, pad["default"])
    return int(a[0]), int(a[1])


def engine_method(fmt: str, engine: str) -> str | None:
    """The quantization method ``engine`` (vllm, sglang) detects from a checkpoint of ``fmt``
    (None: a 16-bit checkpoint; "" where the engine has no loader for it)."""
    if not is_quantized(fmt):
        return None
    return table()[fmt].get(engine, "")


def engine_accepts(fmt: str, engine: str, quantization: str) -> bool:
    """Whether ``engine`` accepts ``--quantization quantization`` for a checkpoint of ``fmt``:
    any on a 16-bit checkpoint (it quantizes at load) or on one whose method replaces the user's
    (ModelOpt's), else only the method it detects from the checkpoint or one it lists as compatible
    (vLLM and SGLang ``_verify_quantization``)."""
    method = engine_method(fmt, engine)
    if method is None or table()[fmt].get(f"{engine}_overrides"):
        return True
    return quantization == method or quantization in table()[fmt].get(f"{engine}_compatible", ())


def engine_deprecated(fmt: str, engine: str) -> bool:
    """Whether ``engine`` loads a checkpoint of ``fmt`` only when told to allow a deprecated
    quantization method (vLLM: --allow-deprecated-quantization)."""
    return bool(table()[fmt].get(f"{engine}_deprecated"))
