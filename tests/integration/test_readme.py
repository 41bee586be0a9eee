"""The README's beanstalk example runs as written against a real node."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import ServerProcess

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_runs(server: ServerProcess) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(b for b in blocks if "greenstalk" in b)
    assert len(example.strip().splitlines()) <= 5
    code = example.replace("11300", str(server.port))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.strip() == "1 hello"
