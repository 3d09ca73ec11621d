"""The figures docs/goodput.md and docs/trace.md quote are what docs/scripts/doc_figures.py computes
now. After a change to the model moves them: `python docs/scripts/doc_figures.py --write`."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "scripts" / "doc_figures.py"


def _script():
    spec = importlib.util.spec_from_file_location("doc_figures", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DOC_FIGURES = _script()


@pytest.mark.parametrize("name", sorted(DOC_FIGURES.BLOCKS))
def test_doc_block_is_what_the_script_prints(name) -> None:
    doc, compute = DOC_FIGURES.BLOCKS[name]
    assert DOC_FIGURES.in_doc(name) == compute(), (
        f"{doc}: figures:{name} drifted; run `python docs/scripts/doc_figures.py --write {name}`")


def test_unknown_block_is_one_line(capsys) -> None:
    assert DOC_FIGURES.main(["nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: names:") and err.count("\n") == 1
