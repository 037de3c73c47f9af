"""The README's Python example is runnable as written (against a temporary data directory)."""

from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_api_example_runs(tmp_path, capsys) -> None:
    blocks = [b for b in python_blocks() if "klog.open(" in b]
    assert blocks, "README lost its Python API example"
    for block in blocks:
        code = block.replace('"/tmp/klog-demo"', repr(str(tmp_path / "demo")))
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "RecordMetadata(topic='orders'" in out
    assert "b'user-42'" in out
