# SPDX-License-Identifier: Apache-2.0
"""The README's Python blocks run as written: the block between <!-- python_validate:begin/end -->
on the host (its first report passes, its second names the swapped nibbles), the one between
<!-- python_torch:begin/end --> (a model of mxkit.torch.Linear under torch.compile, its weight's
copy validated) on a CUDA GPU with torch >= 2.4, where its loss must have fallen below the
starting loss of an untrained model (about 1.3) and the copy pass."""
import contextlib
import io
import os
import re

import pytest

import mxkit

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def block(name):
    with open(README, encoding="utf-8") as f:
        text = f.read()
    m = re.search(rf"<!-- {name}:begin -->\n```python\n(.*?)```\n<!-- {name}:end -->", text, re.S)
    assert m, f"README.md has no python block marked {name}"
    return m.group(1)


def run(code):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"README.md ({code.splitlines()[0]})", "exec"), {})
    return out.getvalue()


def test_validate_block():
    out = run(block("python_validate")).splitlines()
    assert out[0].startswith("PASS mxfp4 rowwise 128x256"), out[0]
    assert "diagnosis: passes with high_first nibbles" in "\n".join(out[1:]), out


def test_torch_block():
    torch = pytest.importorskip("torch", reason="the README's model needs torch (>= 2.4)")
    if not hasattr(torch.library, "custom_op"):
        pytest.skip(f"the README's model needs torch >= 2.4 (torch.library.custom_op), this is {torch.__version__}")
    if not (torch.cuda.is_available() and mxkit.has_gpu()):
        pytest.skip("the README's model runs on a CUDA GPU with mxkit built with MXKIT_GPU=CUDA")
    out = run(block("python_torch"))
    m = re.match(r"loss ([\d.]+); PASS mxfp4 rowwise 4096x1024", out)
    assert m, out
    assert float(m.group(1)) < 0.5, out
