"""The code base stays ruff-clean (ruff is part of the ``test`` extra)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed (pip install -e '.[test]')")
    res = subprocess.run(
        [ruff, "check", "src", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
