"""Spec builders the test modules share.

``spec(...)`` builds a rule-test spec from block bodies (with ``assert_fires`` / ``assert_quiet``
for the fire-and-quiet pair every rule has); ``spec_text(...)`` builds the small models the
runtime tests rehearse, and ``load`` checks one and returns its plan. Nothing here imports torch.
"""
from __future__ import annotations

from parc.api import check_file

CLUSTER = """cluster "c" {{
  nodes         = {nodes}
  gpus_per_node = {gpn}
  gpu           = h100_sxm
  intra_node    = {intra}
  inter_node    = infiniband(400Gb/s)
}}"""


def spec(model="from = llama3_8b", nodes=1, gpn=8, mesh="dp = 8", placement=None, schedule=None,
         train="zero = 1", serve=None, target=None, intra="nvlink(450GB/s)") -> str:
    """A spec with one statement per line in each block; ``train`` is dropped when ``serve`` is given."""
    def block(head, body):
        lines = [s.strip() for s in body.replace(";", "\n").split("\n") if s.strip()]
        return head + " {\n" + "".join(f"  {s}\n" for s in lines) + "}"

    parts = [block('model "m"', model), CLUSTER.format(nodes=nodes, gpn=gpn, intra=intra), block("mesh", mesh)]
    if placement:
        parts.append(block("placement", placement))
    if schedule:
        parts.append(block("schedule", schedule))
    if serve is not None:
        parts.append(block("serve", serve))
    elif train is not None:
        parts.append(block("train", train))
    for name, body in (target or {}).items():
        parts.append(block(f"target {name}", body))
    return "\n".join(parts) + "\n"


def line_of(text: str, needle: str) -> int:
    for i, ln in enumerate(text.splitlines(), 1):
        if needle in ln:
            return i
    raise AssertionError(f"{needle!r} not in spec")


def only(result, code):
    """The diagnostics of ``code`` (asserting there is exactly one)."""
    got = [d for d in result.diagnostics if d.code == code]
    assert len(got) == 1, [(d.code, d.message) for d in result.diagnostics]
    return got[0]


def assert_fires(check_spec, text, code, at, severity="error", target=None, targets=()):
    r = check_spec(text, targets)
    d = only(r, code)
    assert d.span.line == line_of(text, at), (d.span.line, d.message)
    assert d.severity == severity
    assert d.target == target
    return d


def assert_quiet(check_spec, text, code, targets=()):
    r = check_spec(text, targets)
    assert not [d for d in r.diagnostics if d.code == code], [(d.code, d.message) for d in r.diagnostics]
    return r


MOE = "experts = 8\n  top_k = 2\n  moe_ffn_hidden = 1024"
GPT = "mlp = gelu\n  norm = layernorm\n  position = learned\n  bias = true"


def spec_text(world: int, mesh: str, *, zero: int = 0, sp: bool = False, schedule: str = "",
              model: str = "", global_batch: int = 64, tied: bool = False, layers: int = 8,
              serve: bool | str = False) -> str:
    work = ("""serve {
  max_model_len = 2048
  max_num_seqs  = 8
""" + (f"  {serve}\n" if isinstance(serve, str) else "") + "}" if serve else f"""train {{
  optimizer         = sgd
  zero              = {zero}
  sequence_parallel = {'true' if sp else 'false'}
}}""")
    return f"""
model "tiny" {{
  layers     = {layers}
  hidden     = 1024
  heads      = 16
  kv_heads   = 8
  ffn_hidden = 4096
  vocab      = 32000
  seq_len    = 2048
  tied_embeddings = {'true' if tied else 'false'}
  {model}
}}
cluster "box" {{
  nodes         = 1
  gpus_per_node = {world}
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
}}
mesh {{
  {mesh}
}}
schedule {{
  micro_batch  = 1
  global_batch = {global_batch}
  {schedule}
}}
{work}
"""


def load(tmp_path, name: str, text: str):
    path = tmp_path / f"{name}.par"
    path.write_text(text)
    res = check_file(path, root=tmp_path)
    assert res.ok, [f"{d.code} {d.message}" for d in res.errors]
    return res.plan


# A GPT as Korthikanti et al. 2022 (and Narayanan et al. 2021) ran it on Selene's DGX A100s: GELU MLP
# of 4h, LayerNorm, learned positions, biases, tied embeddings, vocabulary 51,200, sequence 2048;
# TP + SP + selective recompute, the paper's 'present work'. Fields: l, h, ffn, a, nodes, p, v, b, B, pipeline.
KORTHIKANTI_SPEC = """
model "gpt" {{
  layers = {l}
  hidden = {h}
  ffn_hidden = {ffn}
  heads = {a}
  kv_heads = {a}
  vocab = 51200
  seq_len = 2048
  mlp = gelu
  norm = layernorm
  position = learned
  bias = true
  tied_embeddings = true
}}
cluster "selene" {{
  nodes = {nodes}
  gpus_per_node = 8
  gpu = a100_sxm_80gb
  intra_node = nvlink(300GB/s)
  inter_node = infiniband(200Gb/s)
}}
mesh {{
  pp = {p}
  dp = 1
  tp = 8
}}
schedule {{
  pipeline = {pipeline}
  virtual_stages = {v}
  micro_batch = {b}
  global_batch = {B}
}}
train {{
  sequence_parallel = true
  recompute = selective
}}
"""
