"""The accuracy figures of README.md and docs/validation.md are what `clustertwin validate` gives on the
CSVs of data/validation/, to the precision they are written with: the prose cannot drift from the data.

When a model change moves a figure, regenerate docs/validation.md's tables with
`python benchmarks/validation_table.py data/validation/<file>.csv` and update the README's sentence.
"""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from clustertwin.cli import main
from clustertwin.validate import ValidationReport, read_runs, validate_rows

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "validation"
FILES = ("public_runs.csv", "dense_public_runs.csv", "torchtitan_runs.csv", "moe_public_runs.csv")


def _prose(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())   # the text wraps lines anywhere


def _pct(x: float, digits: int) -> str:
    return f"{x * 100:.{digits}f}"


def _within(errors: list[float], bound: float) -> int:
    return sum(abs(e) <= bound for e in errors)


@pytest.fixture(scope="module")
def reports() -> dict[str, ValidationReport]:
    return {name: validate_rows(read_runs(DATA / name)) for name in FILES}


def test_readme_public_runs_figures_are_what_validate_prints(capsys) -> None:
    """README: "`clustertwin validate data/validation/public_runs.csv` compares predictions with 51
    published runs (...): step-time MAPE 6.9%, 48 of 51 rows within 20%." — checked through the CLI."""
    assert main(["validate", str(DATA / "public_runs.csv"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    errors = [r["error"] for r in out["rows"] if r["error"] is not None]
    assert out["n_predicted"] == out["n"] == len(errors)
    assert set(out["mape_by_metric"]) == {"iteration_time_s"}       # "step-time" MAPE

    text = _prose(ROOT / "README.md")
    m = re.search(r"`clustertwin validate data/validation/public_runs\.csv` compares predictions with (\d+) "
                  r"published runs .*?: step-time MAPE ([\d.]+)%, (\d+) of (\d+) rows within 20%", text)
    assert m, "README: the accuracy sentence on public_runs.csv is not where this test looks"
    runs, mape, within, of = m.groups()
    assert int(runs) == int(of) == out["n"]
    assert mape == _pct(out["mape"], len(mape.split(".")[1]) if "." in mape else 0)
    assert int(within) == _within(errors, 0.20)


def test_readme_data_validation_figures(reports) -> None:
    """README: "`data/validation/` adds the Llama 3 405B configurations (MAPE 9.9%), torchtitan's ...
    runs with their peak memory (tokens/s 27%, memory 17%) and 25 published MoE runs (56%: ...)"."""
    text = _prose(ROOT / "README.md")
    dense = re.search(r"Llama 3 405B configurations \(MAPE ([\d.]+)%\)", text)
    titan = re.search(r"torchtitan's published .*? \(tokens/s ([\d.]+)%, memory ([\d.]+)%\)", text)
    moe = re.search(r"(\d+) published MoE runs \(([\d.]+)%", text)
    assert dense and titan and moe, "README: the data/validation accuracy sentence is not where this test looks"

    def shown(figure: str, value: float) -> bool:
        return figure == _pct(value, len(figure.split(".")[1]) if "." in figure else 0)

    assert shown(dense.group(1), reports["dense_public_runs.csv"].mape)
    by = reports["torchtitan_runs.csv"].mape_by_metric
    assert shown(titan.group(1), by["tokens_per_s_per_gpu"]) and shown(titan.group(2), by["peak_memory_bytes"])
    assert int(moe.group(1)) == len(reports["moe_public_runs.csv"].rows)
    assert shown(moe.group(2), reports["moe_public_runs.csv"].mape)


def _summary_line():
    """benchmarks/validation_table.py writes the summary line under each table of docs/validation.md."""
    spec = importlib.util.spec_from_file_location("validation_table", ROOT / "benchmarks" / "validation_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.summary


@pytest.mark.parametrize("name", FILES)
def test_docs_validation_summary_lines(reports, name) -> None:
    """docs/validation.md: the section of each CSV ends its table with the line the benchmark prints,
    e.g. "rows 51, predicted 51, failed 0; MAPE 6.9% (...); ... within 20%: 48"."""
    text = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    sections = re.split(r"(?m)^## ", text)
    section = [s for s in sections if s.splitlines()[0].endswith(f"(data/validation/{name})")]
    assert len(section) == 1, f"docs/validation.md: no single section headed (data/validation/{name})"
    lines = [ln for ln in section[0].splitlines() if ln.startswith("rows ")]
    assert lines == [_summary_line()(reports[name])]
