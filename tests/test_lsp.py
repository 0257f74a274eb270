"""parc lsp over stdio, as an editor speaks to it: a real subprocess and the protocol's own
framing (Content-Length headers, JSON-RPC 2.0), written here without a client library."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="parc lsp needs the `lsp` extra (pygls)")

from parc.language.fmt import format_text  # noqa: E402

DATA = Path(__file__).parent / "data"
HEADS = (DATA / "render" / "heads.par").read_text()  # tp = 6 over 64 heads: P102 at 13:3
ROOT = Path(__file__).resolve().parent.parent


class Client:
    """A minimal LSP client: requests and notifications out, messages in, by id."""

    def __init__(self, cwd: Path):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, "-m", "parc", "lsp", "--stdio"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.next_id = 0
        self.buf = b""
        self.notes: list[dict] = []

    def send(self, msg: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **msg}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if sep:
                length = int(next(h.split(b":")[1] for h in head.split(b"\r\n")
                                  if h.lower().startswith(b"content-length")))
                if len(rest) >= length:
                    self.buf = rest[length:]
                    return json.loads(rest[:length])
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no message from parc lsp in {timeout} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError(self.proc.stderr.read().decode())
            self.buf += chunk

    def request(self, method: str, params, timeout: float = 30) -> dict:
        self.next_id += 1
        rid = self.next_id
        self.send({"id": rid, "method": method, "params": params})
        while True:
            msg = self._read(timeout)
            if msg.get("id") == rid and "method" not in msg:
                assert "error" not in msg, msg
                return msg.get("result")
            if "method" in msg and "id" in msg:  # a request from the server (registration): answer it
                self.send({"id": msg["id"], "result": None})
            elif "method" in msg:
                self.notes.append(msg)

    def notify(self, method: str, params) -> None:
        self.send({"method": method, "params": params})

    def diagnostics(self, uri: str, version: int, timeout: float = 30, until=None) -> list[dict]:
        """The diagnostics published for ``uri`` at ``version`` (waiting for them; with
        ``until``, for the first such list it accepts)."""
        deadline = time.monotonic() + timeout
        while True:
            for n in self.notes:
                p = n["params"]
                if n["method"] == "textDocument/publishDiagnostics" and p["uri"] == uri and p.get("version") == version:
                    if until is None or until(p["diagnostics"]):
                        return p["diagnostics"]
            msg = self._read(max(0.1, deadline - time.monotonic()))
            if "method" in msg and "id" not in msg:
                self.notes.append(msg)


def _apply(text: str, edits: list[dict]) -> str:
    """Apply LSP text edits (ASCII text: characters are columns)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))

    def off(p):
        return starts[p["line"]] + p["character"]

    for e in sorted(edits, key=lambda e: off(e["range"]["start"]), reverse=True):
        text = text[:off(e["range"]["start"])] + e["newText"] + text[off(e["range"]["end"]):]
    return text


@pytest.fixture
def session(tmp_path):
    spec = tmp_path / "heads.par"
    spec.write_text(HEADS)
    c = Client(tmp_path)
    init = c.request("initialize", {"processId": os.getpid(), "rootUri": spec.parent.as_uri(),
                                    "capabilities": {}})
    c.notify("initialized", {})
    yield c, spec, init
    if c.proc.poll() is None:
        c.proc.kill()
        c.proc.wait()


def test_a_session_from_initialize_to_shutdown(session):
    c, spec, init = session
    caps = init["capabilities"]
    assert caps["hoverProvider"] and caps["definitionProvider"] and caps["documentFormattingProvider"]
    assert "completionProvider" in caps and "codeActionProvider" in caps
    uri = spec.as_uri()
    c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "par", "version": 1,
                                                       "text": HEADS}})
    diags = c.diagnostics(uri, 1)
    p102 = [d for d in diags if d["code"] == "P102"]
    assert len(p102) == 1
    d = p102[0]
    assert d["range"] == {"start": {"line": 12, "character": 2}, "end": {"line": 12, "character": 8}}
    assert d["severity"] == 1 and d["source"] == "parc" and "tp = 6 does not divide" in d["message"]
    assert d["relatedInformation"][0]["message"] == "heads = 64"

    # hover on the cluster block: its numbers need a plan, so hover a degree of a valid spec below;
    # here the key's documentation
    h = c.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 4, "character": 4}})
    assert "gpus_per_node" in h["contents"]["value"]

    # completion right after `mesh {`: the mesh's keys
    text2 = HEADS.replace("mesh {\n  dp = 2\n  tp = 6\n}", "mesh { ")
    spec2 = spec.with_name("draft.par")
    spec2.write_text(text2)
    uri2 = spec2.as_uri()
    c.notify("textDocument/didOpen", {"textDocument": {"uri": uri2, "languageId": "par", "version": 1,
                                                       "text": text2}})
    line = text2.splitlines().index("mesh { ")
    got = c.request("textDocument/completion", {"textDocument": {"uri": uri2},
                                                "position": {"line": line, "character": 7}})
    labels = {i["label"] for i in got["items"]}
    assert {"pp", "dp", "cp", "tp", "ep"} <= labels and "model" not in labels
    tp = next(i for i in got["items"] if i["label"] == "tp")
    assert "tensor-parallel" in tp["documentation"]["value"]

    # formatting equals `parc fmt`
    messy = HEADS.replace("  dp = 2", "  dp    = 2")
    c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                        "contentChanges": [{"text": messy}]})
    edits = c.request("textDocument/formatting", {"textDocument": {"uri": uri},
                                                  "options": {"tabSize": 2, "insertSpaces": True}})
    assert _apply(messy, edits) == format_text(messy, str(spec)) == HEADS

    # the code action's edit, applied and sent back, makes the P102 go away
    c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 3},
                                        "contentChanges": [{"text": HEADS}]})
    assert any(x["code"] == "P102" for x in c.diagnostics(uri, 3))
    actions = c.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": d["range"], "context": {"diagnostics": [d]}})
    titles = [a["title"] for a in actions]
    assert "P102: set `tp = 2` and `dp = 6`" in titles
    act = actions[titles.index("P102: set `tp = 2` and `dp = 6`")]
    fixed = _apply(HEADS, act["edit"]["changes"][uri])
    assert "  dp = 6\n  tp = 2\n" in fixed
    c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 4},
                                        "contentChanges": [{"text": fixed}]})
    assert not [x for x in c.diagnostics(uri, 4) if x["code"] == "P102"]

    # hover on the mesh degree of the now valid plan: its group, link and bytes
    line = fixed.splitlines().index("  tp = 2")
    h = c.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": line, "character": 3}})
    value = h["contents"]["value"]
    assert "6 groups of 2 GPUs" in value and "ranks 0, 1" in value and "nvlink" in value and "per GPU" in value
    h = c.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 2}})
    assert "memory per GPU" in h["contents"]["value"] and "TTFT" in h["contents"]["value"]
    h = c.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 30}})
    assert "llama3_70b" in h["contents"]["value"] and "heads" in h["contents"]["value"]

    start = time.monotonic()
    assert c.request("shutdown", None, timeout=5) is None
    c.notify("exit", None)
    c.proc.wait(timeout=5)
    assert time.monotonic() - start < 5
    assert c.proc.returncode == 0


def test_use_definition_and_imports_rechecked(session):
    c, spec, _ = session
    cluster = spec.with_name("box.par")
    cluster.write_text('cluster "box" {\n  nodes         = 1\n  gpus_per_node = 8\n  gpu           = h100_sxm\n}\n')
    main = spec.with_name("main.par")
    text = 'use "box.par"\n\nmodel "m" { from = llama3_8b }\n\nmesh { tp = 8 }\n\nserve { max_model_len = 4096 }\n'
    main.write_text(text)
    uri, curi = main.as_uri(), cluster.as_uri()
    c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "par", "version": 1, "text": text}})
    assert not [d for d in c.diagnostics(uri, 1) if d["severity"] == 1]
    loc = c.request("textDocument/definition", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 7}})
    assert loc["uri"] == curi
    # the imported file, opened and changed without saving: the spec that uses it is checked again
    c.notify("textDocument/didOpen", {"textDocument": {"uri": curi, "languageId": "par", "version": 1,
                                                       "text": cluster.read_text()}})
    c.notes.clear()
    c.notify("textDocument/didChange", {"textDocument": {"uri": curi, "version": 2}, "contentChanges": [
        {"text": cluster.read_text().replace("gpus_per_node = 8", "gpus_per_node = 4")}]})
    again = c.diagnostics(uri, 1, timeout=10, until=lambda ds: any(d["code"] == "P101" for d in ds))
    assert "cluster \"box\" has 4" in next(d for d in again if d["code"] == "P101")["message"]
    c.request("shutdown", None, timeout=5)
    c.notify("exit", None)
    c.proc.wait(timeout=5)


def test_fix_all_source_action_applies_every_safe_fix(session):
    # one action, of the kind editors run on save (source.fixAll), applies what `parc lint --fix`
    # would: here a misspelt preset, a unit and a long key name
    c, spec, _ = session
    text = (DATA / "fix" / "commented.par").read_text()
    path = spec.with_name("commented.par")
    path.write_text(text)
    uri = path.as_uri()
    c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "par", "version": 1,
                                                       "text": text}})
    diags = c.diagnostics(uri, 1)
    assert {"P010", "P004", "P007"} <= {d["code"] for d in diags}
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}
    actions = c.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": whole,
        "context": {"diagnostics": [], "only": ["source.fixAll"]}})
    assert [a["kind"] for a in actions] == ["source.fixAll"], actions
    fixed = _apply(text, actions[0]["edit"]["changes"][uri])
    c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                        "contentChanges": [{"text": fixed}]})
    left = {d["code"] for d in c.diagnostics(uri, 2)}
    assert not {"P010", "P004", "P007"} & left, left
    assert "# the preset, misspelt" in fixed and "tp = 1" in fixed
    # with nothing left to fix, no fix-all is offered
    again = c.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": whole,
        "context": {"diagnostics": [], "only": ["source.fixAll"]}})
    assert not again
