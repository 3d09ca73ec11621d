"""The core (specs, parallel, workload, cost, schedule) type-checks clean under mypy, as configured in
pyproject.toml's [tool.mypy]."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_core_is_mypy_clean() -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extra")
    cwd = os.getcwd()
    os.chdir(ROOT)    # the [tool.mypy] files are relative to the repository root
    try:
        out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml")])
    finally:
        os.chdir(cwd)
    assert status == 0, out + err
