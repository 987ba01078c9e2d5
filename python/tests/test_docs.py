"""The Python snippets of docs/python.md and README.md run as written: from the repository
root, in a fresh interpreter, each file's ```python blocks in order in one namespace (a later
snippet may continue an earlier one's variables), with the default model the package finds
($TERN_MODEL unset)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def blocks(rel):
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        return BLOCK.findall(f.read())


def test_python_md_has_snippets():
    assert len(blocks("docs/python.md")) >= 6  # the extraction itself works


@pytest.mark.parametrize("rel", ["docs/python.md", "README.md"])
def test_snippets_run(rel):
    code = blocks(rel)
    if not code:
        return
    if not os.path.exists(os.path.join(REPO, "models", "tern-default.gguf")):
        pytest.skip("models/tern-default.gguf missing")
    # one script: each block's start is marked so a failure names its block
    script = "".join("print('--- block %d', flush=True)\n%s\n" % (i, c) for i, c in enumerate(code))
    env = dict(os.environ)
    env.pop("TERN_MODEL", None)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
    last = [l for l in out.stdout.splitlines() if l.startswith("--- block ")]
    assert out.returncode == 0, "%s: %s failed:\n%s" % (rel, last[-1] if last else "?", out.stderr[-3000:])
    assert len(last) == len(code)
