"""The `parc explain --html` page in a real browser: headless Chromium opens it from disk and
counts the GPU boxes and schedule blocks that were laid out with a non-zero size."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from parc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama3-70b-train.par"

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome")
                if shutil.which(b)), None)

# Appended to a copy of the page (the page itself has no script): it measures what was rendered.
PROBE = """<script>
addEventListener('load', () => {
  const shown = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const count = (sel) => Array.from(document.querySelectorAll(sel)).filter(shown).length;
  const out = {
    svgs: Array.from(document.querySelectorAll('svg')).filter(shown).map(s => s.getAttribute('data-kind')),
    gpus: count('svg.parc-mesh g.gpu'),
    blocks: count('svg.parc-schedule rect.block'),
    blocks_F: count('svg.parc-schedule rect.block.F'),
    idle: count('svg.parc-schedule rect.idle'),
    bars: count('svg.parc-memory g.bar'),
    tables: document.querySelectorAll('table').length,
    title: document.title,
  };
  const pre = document.createElement('pre');
  pre.id = 'parc-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine (Debian: apt-get install chromium "
                                            "chromium-driver); the page is checked without a browser in "
                                            "test_pictures.py")
def test_explain_page_renders_in_headless_chromium(tmp_path, capsys):
    page = tmp_path / "plan.html"
    assert main(["explain", str(EXAMPLE), "--html", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text(encoding="utf-8")
    want_blocks = int(re.search(r'class="parc-schedule"[^>]*data-blocks="(\d+)"', text).group(1))
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--allow-file-access-from-files", f"--user-data-dir={tmp_path / 'profile'}",
           "--dump-dom", probe.resolve().as_uri()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    m = re.search(r'<pre id="parc-probe">(.*?)</pre>', p.stdout, re.S)
    assert m, f"no probe result; exit {p.returncode}; stderr: {p.stderr[-2000:]}"
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert got["svgs"] == ["mesh", "schedule", "memory"]
    assert got["gpus"] == 64                      # 8 nodes × 8 GPUs, every box laid out
    assert got["blocks"] == want_blocks > 0       # every F/B block of the drawn schedule
    assert 0 < got["blocks_F"] < got["blocks"] and got["idle"] > 0
    assert got["bars"] == 4                       # one bar per pipeline stage
    assert got["tables"] >= 4 and got["title"].startswith("parc explain")
