"""The README's op snippet runs as written (the front door: a new user copies it first)."""

import os
import pathlib
import re
import subprocess
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEVICE_LINE = 'dev = "cuda"'


def test_the_readmes_op_snippet_runs():
    text = (ROOT / "README.md").read_text()
    (snippet,) = re.findall(r"^## The op\n\n```python\n(.*?)^```", text, flags=re.S | re.M)
    assert DEVICE_LINE in snippet  # the one line a CPU user changes, as the snippet says
    env = dict(os.environ)
    if not torch.cuda.is_available():
        snippet = snippet.replace(DEVICE_LINE, 'dev = "cpu"')
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
