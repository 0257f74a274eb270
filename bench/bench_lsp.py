"""The language server's latency on a 100-line spec: in process and over the protocol.

Targets: diagnostics within 100 ms of a change; hover and completion within 50 ms. Measured
side by side in one run, on the same spec (examples/llama3-70b-train.par with its cluster
inlined, three target blocks and comments, 100 lines):

* in process: ``analyse`` (the lint of the changed buffer, every check, style included), hover
  on a mesh degree and on a block (explain's numbers, the estimate cached per version), and
  completion inside ``mesh {``;
* over stdio: ``parc lsp`` as a subprocess; the time from sending ``didChange`` to reading its
  ``publishDiagnostics``, and the round trip of ``hover`` and ``completion`` requests.

Each change alters a comment and a degree (tp 8 <-> 4, dp auto follows), so no text is linted twice.

Run: python bench/bench_lsp.py [--runs 30]
"""
from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def spec_text() -> str:
    ex = (ROOT / "examples" / "llama3-70b-train.par").read_text()
    cluster = (ROOT / "examples" / "clusters" / "dgx-h100-8node.par").read_text()
    text = ex.replace('use "clusters/dgx-h100-8node.par"\n', cluster)
    text += ('\ntarget torchrun {\n  entrypoint = "train.py"\n  args       = ["--config", "llama.yaml"]\n}\n'
             '\ntarget megatron {\n  entrypoint = "pretrain_gpt.py"\n}\n'
             '\ntarget slurm {\n  partition = "gpu"\n  time      = "48:00:00"\n}\n')
    lines = text.splitlines()
    while len(lines) < 100:
        lines.insert(1, "# padding: a comment line, as long specs carry notes")
    return "\n".join(lines[:100]) + "\n"


def variant(text: str, i: int) -> str:
    """The spec after the ``i``-th change: a degree flipped and a comment renumbered, so that no
    text is linted twice."""
    t = text.replace("# padding: a comment line", f"# change {i}: a comment line", 1)
    return t.replace("  tp = 8", "  tp = 4") if i % 2 else t


def ms(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"median {statistics.median(xs) * 1e3:6.1f} ms   p90 {xs[int(0.9 * (len(xs) - 1))] * 1e3:6.1f} ms"


def in_process(text: str, path: str, runs: int) -> dict[str, list[float]]:
    from parc.lint.engine import lint_texts
    from parc.lsp.analysis import analyse
    from parc.lsp.complete import complete
    from parc.lsp.hover import hover

    out: dict[str, list[float]] = {"diagnostics": [], "hover (degree)": [], "hover (block)": [], "completion": []}
    analyse(lint_texts, path, text)  # warm: imports, caches of presets and rules
    for i in range(runs):
        t = variant(text, i)
        t0 = time.perf_counter()
        a = analyse(lint_texts, path, t)
        out["diagnostics"].append(time.perf_counter() - t0)
        for name, needle in (("hover (degree)", "  tp = "), ("hover (block)", "mesh {")):
            t0 = time.perf_counter()
            hover(a, t.index(needle) + 3)
            out[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        complete(t, t.index("mesh {") + 6)
        out["completion"].append(time.perf_counter() - t0)
    return out


class Client:
    def __init__(self, cwd: str):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, "-m", "parc", "lsp"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buf, self.n = b"", 0

    def send(self, msg: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **msg}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def read(self) -> dict:
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if sep:
                n = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
                if len(rest) >= n:
                    self.buf = rest[n:]
                    return json.loads(rest[:n])
            select.select([self.proc.stdout], [], [], 30)
            self.buf += os.read(self.proc.stdout.fileno(), 65536)

    def request(self, method: str, params) -> dict:
        self.n += 1
        self.send({"id": self.n, "method": method, "params": params})
        while True:
            m = self.read()
            if m.get("id") == self.n and "method" not in m:
                return m

    def published(self, version: int) -> None:
        while True:
            m = self.read()
            if m.get("method") == "textDocument/publishDiagnostics" and m["params"].get("version") == version:
                return


def over_stdio(text: str, folder: str, path: str, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"diagnostics": [], "hover (degree)": [], "hover (block)": [], "completion": []}
    c = Client(folder)
    c.request("initialize", {"processId": os.getpid(), "rootUri": Path(folder).as_uri(), "capabilities": {}})
    c.send({"method": "initialized", "params": {}})
    uri = Path(path).as_uri()
    c.send({"method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "par", "version": 1, "text": text}}})
    c.published(1)
    lines = text.splitlines()
    deg = {"line": lines.index("  tp = 8"), "character": 3}
    blk = {"line": next(i for i, ln in enumerate(lines) if ln.startswith("mesh {")), "character": 2}
    for i in range(runs):
        v = i + 2
        t0 = time.perf_counter()
        c.send({"method": "textDocument/didChange", "params": {
            "textDocument": {"uri": uri, "version": v}, "contentChanges": [{"text": variant(text, i + 1)}]}})
        c.published(v)
        out["diagnostics"].append(time.perf_counter() - t0)
        for name, at in (("hover (degree)", deg), ("hover (block)", blk)):
            t0 = time.perf_counter()
            c.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": at})
            out[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        c.request("textDocument/completion", {"textDocument": {"uri": uri},
                                              "position": {"line": blk["line"], "character": 6}})
        out["completion"].append(time.perf_counter() - t0)
    c.request("shutdown", None)
    c.send({"method": "exit", "params": None})
    c.proc.wait(timeout=5)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    text = spec_text()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "spec.par")
        Path(path).write_text(text)
        print(f"spec: {len(text.splitlines())} lines; {args.runs} changes; targets: diagnostics <= 100 ms, "
              f"hover and completion <= 50 ms")
        for where, got in (("in process", in_process(text, path, args.runs)),
                           ("over stdio", over_stdio(text, d, path, args.runs))):
            print(where)
            for name, xs in got.items():
                limit = 0.1 if name == "diagnostics" else 0.05
                verdict = "ok" if statistics.median(xs) <= limit else "OVER"
                print(f"  {name:<16} {ms(xs)}   {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
