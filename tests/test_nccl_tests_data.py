"""data/validation/nccl_tests.csv: published nccl-tests measurements, checked for form and for the
busbw = algbw * factor identity of nccl-tests (doc/PERFORMANCE.md), within the rounding of the source.

The test only reads the CSV; it does not import clustertwin.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

CSV_PATH = Path(__file__).resolve().parents[1] / "data" / "validation" / "nccl_tests.csv"

COLUMNS = [
    "run_id", "source", "source_url", "gpu", "num_gpus", "gpus_per_node", "nodes", "interconnect",
    "nccl_version", "op", "bytes", "dtype", "algorithm", "time_s", "algbw_bytes_per_s",
    "busbw_bytes_per_s", "notes",
]
OPS = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"}
ALGORITHMS = {"", "ring", "tree", "nvls", "collnet", "auto"}
INT_COLUMNS = ["num_gpus", "gpus_per_node", "nodes", "bytes"]
FLOAT_COLUMNS = ["time_s", "algbw_bytes_per_s", "busbw_bytes_per_s"]

# nccl-tests prints algbw and busbw in GB/s (1e9 B/s) with two decimals: each value is within
# half a unit of its last digit, 0.005 GB/s.
HALF_UNIT = 0.005e9


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw for `op` on `n` ranks (doc/PERFORMANCE.md, "Summary")."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0  # broadcast, send_recv


@pytest.fixture(scope="module")
def table() -> tuple[list[str], list[dict[str, str]]]:
    with CSV_PATH.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_header_is_the_documented_schema(table):
    header, _ = table
    assert header == COLUMNS


def test_rows_are_well_formed(table):
    _, rows = table
    assert len(rows) >= 200
    for i, r in enumerate(rows, start=2):
        where = f"line {i} ({r['run_id']})"
        assert None not in r and all(v is not None for v in r.values()), f"{where}: wrong column count"
        assert r["run_id"] and r["source"], where
        assert r["source_url"].startswith("https://"), where
        assert r["op"] in OPS, where
        assert r["algorithm"] in ALGORITHMS, where
        for col in INT_COLUMNS:
            if r[col] != "":
                assert int(r[col]) > 0, f"{where}: {col}"
        for col in FLOAT_COLUMNS:
            if r[col] != "":
                v = float(r[col])
                assert math.isfinite(v) and v >= 0, f"{where}: {col}"
        assert any(r[c] != "" for c in FLOAT_COLUMNS), f"{where}: no measurement"
        if r["num_gpus"] and r["gpus_per_node"] and r["nodes"]:
            assert int(r["num_gpus"]) == int(r["gpus_per_node"]) * int(r["nodes"]), where


def test_one_row_per_source_configuration_op_and_size(table):
    _, rows = table
    keys = [(r["run_id"], r["op"], r["bytes"]) for r in rows]
    assert len(keys) == len(set(keys))


def test_a_run_has_one_configuration(table):
    _, rows = table
    fixed = ["source_url", "gpu", "num_gpus", "gpus_per_node", "nodes", "interconnect", "nccl_version", "op", "algorithm"]
    seen: dict[str, tuple[str, ...]] = {}
    for r in rows:
        cfg = tuple(r[c] for c in fixed)
        assert seen.setdefault(r["run_id"], cfg) == cfg, r["run_id"]


def test_busbw_is_algbw_times_the_op_factor(table):
    _, rows = table
    checked = 0
    for r in rows:
        if not (r["algbw_bytes_per_s"] and r["busbw_bytes_per_s"] and r["num_gpus"]):
            continue
        f = bus_factor(r["op"], int(r["num_gpus"]))
        alg, bus = float(r["algbw_bytes_per_s"]), float(r["busbw_bytes_per_s"])
        # both printed values are rounded to 0.01 GB/s: |bus - f*alg| <= 0.005 + f*0.005 GB/s
        tol = HALF_UNIT * (1.0 + f) * 1.0001
        assert abs(bus - f * alg) <= tol, f"{r['run_id']} {r['bytes']}: busbw {bus} vs {f:.4f} * algbw {alg}"
        checked += 1
    assert checked >= 100


def test_algbw_is_size_over_time_where_both_are_given(table):
    # algbw = S / t (doc/PERFORMANCE.md). Time is printed with 4 significant digits at most, algbw to
    # 0.01 GB/s; allow both roundings (the relative one of the time and half a unit of algbw).
    _, rows = table
    for r in rows:
        if not (r["time_s"] and r["algbw_bytes_per_s"]):
            continue
        t, alg = float(r["time_s"]), float(r["algbw_bytes_per_s"])
        s_over_t = int(r["bytes"]) / t
        tol = HALF_UNIT + s_over_t * 5e-3
        assert abs(s_over_t - alg) <= tol, f"{r['run_id']} {r['bytes']}: S/t {s_over_t} vs algbw {alg}"


def test_coverage(table):
    _, rows = table
    sources = {r["source_url"].split("/blob/")[0] for r in rows}
    assert len(sources) >= 6
    assert {"1"} < {r["nodes"] for r in rows}  # one node and several
    gpus = {r["gpu"] for r in rows}
    assert any(g.startswith("a100") for g in gpus) and any(g.startswith("h100") for g in gpus)
    sizes = [int(r["bytes"]) for r in rows]
    assert min(sizes) <= 1024 and max(sizes) >= 2**30
