"""data/validation/serving_runs.csv: published serving measurements, checked for form against the serving
schema (shared/validation/SERVING.md: its column names and metric names are a contract) and for the
identities the figures must obey within the rounding of their sources.

The file is generated from verbatim transcriptions by data/validation/scripts/build_serving_runs.py; the
last test rebuilds it and compares, so a hand edit of the CSV (or of a transcription without rebuilding)
fails here.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from collections import defaultdict
from pathlib import Path

import pytest

from clustertwin.catalog import load_model, preset_names

ROOT = Path(__file__).resolve().parents[1]
CSV_PATH = ROOT / "data" / "validation" / "serving_runs.csv"
BUILDER = ROOT / "data" / "validation" / "scripts" / "build_serving_runs.py"

# Every column of SERVING.md's table, in the order the file uses.
SCHEMA_COLUMNS = [
    "run_id", "source", "source_url", "model", "arch", "layers", "hidden", "heads", "kv_heads", "ffn_hidden",
    "vocab", "moe_experts", "moe_topk", "gpu", "num_gpus", "tp", "pp", "ep", "dp_replicas", "engine",
    "engine_version", "precision", "kv_cache_dtype", "workload", "input_len", "output_len", "dataset",
    "concurrency", "request_rate", "num_requests", "max_batch", "metric", "value", "notes",
]
METRICS = {
    "output_tokens_per_s", "output_tokens_per_s_per_gpu", "total_tokens_per_s", "requests_per_s",
    "ttft_mean_s", "ttft_p50_s", "tpot_mean_s", "tpot_p50_s", "itl_mean_s", "e2e_latency_mean_s",
}
ENGINES = {"vllm", "sglang", "trtllm"}
PRECISIONS = {"", "bf16", "fp16", "fp8", "nvfp4", "int4-awq"}
KV_DTYPES = {"", "bf16", "fp16", "fp8"}
WORKLOADS = {"offline", "concurrency", "poisson", "static"}
ARCHS = {"gpt", "llama", "mixtral", "deepseek", "deepseek_v3", "qwen3_moe"}
INT_COLUMNS = ["layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "moe_experts", "moe_topk",
               "num_gpus", "tp", "pp", "ep", "dp_replicas", "input_len", "output_len", "concurrency",
               "num_requests", "max_batch"]


def _int(text: str) -> int | None:
    return int(text) if text != "" else None


@pytest.fixture(scope="module")
def table() -> tuple[list[str], list[dict[str, str]]]:
    with CSV_PATH.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_header_is_the_serving_schema(table):
    header, _ = table
    assert header == SCHEMA_COLUMNS


def test_rows_are_well_formed(table):
    _, rows = table
    assert len(rows) >= 80
    seen = set()
    for i, r in enumerate(rows, start=2):
        where = f"line {i} ({r['run_id']}, {r['metric']})"
        assert None not in r and all(v is not None for v in r.values()), f"{where}: wrong column count"
        assert r["run_id"] and r["source"] and r["notes"], where
        assert r["source_url"].startswith("https://"), where
        assert (r["run_id"], r["metric"]) not in seen, f"{where}: duplicate metric of one run"
        seen.add((r["run_id"], r["metric"]))
        assert r["metric"] in METRICS, where
        value = float(r["value"])
        assert math.isfinite(value) and value > 0, where
        assert r["engine"] in ENGINES, where
        assert r["precision"] in PRECISIONS, where
        assert r["kv_cache_dtype"] in KV_DTYPES, where
        assert r["arch"] in ARCHS, where
        for c in INT_COLUMNS:
            if r[c] != "":
                assert int(r[c]) > 0, f"{where}: {c}"
        if r["request_rate"] != "":
            assert float(r["request_rate"]) > 0, where


def test_gpus_and_models_are_catalog_names(table):
    _, rows = table
    gpus = set(preset_names("gpus"))
    models = set(preset_names("models"))
    for r in rows:
        assert r["gpu"] in gpus, r["run_id"]
        assert r["model"] in models, r["run_id"]


def test_model_dimensions_match_the_catalog(table):
    """The dimension columns repeat the catalog preset named in `model` (MoE: ffn_hidden = one expert)."""
    _, rows = table
    for name in sorted({r["model"] for r in rows}):
        m = load_model(name)
        expert = m.moe_ffn_hidden_size or m.ffn_hidden_size
        expected = {"layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_heads,
                    "kv_heads": m.num_kv_heads, "vocab": m.vocab_size,
                    "ffn_hidden": expert if m.moe_num_experts else m.ffn_hidden_size,
                    "moe_experts": m.moe_num_experts or None, "moe_topk": m.moe_top_k if m.moe_num_experts else None}
        for r in (r for r in rows if r["model"] == name):
            for column, value in expected.items():
                assert _int(r[column]) == value, f"{r['run_id']}: {column}"


def test_workload_has_the_fields_it_needs(table):
    _, rows = table
    for r in rows:
        where = f"{r['run_id']} ({r['workload']})"
        assert r["workload"] in WORKLOADS, where
        if r["workload"] == "concurrency":
            assert r["concurrency"] and r["request_rate"] == "", where
        elif r["workload"] == "poisson":
            assert r["request_rate"] and r["concurrency"] == "", where
        elif r["workload"] == "static":
            assert r["max_batch"], where
        else:  # offline: every request issued at once
            assert r["request_rate"] == "" and r["concurrency"] == "", where
        # Fixed lengths or a named length distribution, never both and never neither.
        fixed = bool(r["input_len"]) and bool(r["output_len"])
        assert fixed != bool(r["dataset"]), where
        assert bool(r["input_len"]) == bool(r["output_len"]), where


def test_parallel_plan_fits_the_gpus(table):
    """tp * pp * dp_replicas (ep shares the GPUs of tp) equals num_gpus where all are stated."""
    _, rows = table
    for r in rows:
        tp, pp, dp = _int(r["tp"]), _int(r["pp"]) or 1, _int(r["dp_replicas"])
        if tp is not None and dp is not None:
            assert tp * pp * dp == int(r["num_gpus"]), r["run_id"]


def _runs(rows: list[dict[str, str]]) -> dict[str, dict[str, float]]:
    runs: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        runs[r["run_id"]][r["metric"]] = float(r["value"])
    return runs


def test_rows_of_one_run_share_its_conditions(table):
    _, rows = table
    conditions = [c for c in SCHEMA_COLUMNS if c not in ("metric", "value", "notes")]
    first: dict[str, dict[str, str]] = {}
    for r in rows:
        base = first.setdefault(r["run_id"], r)
        for c in conditions:
            assert r[c] == base[c], f"{r['run_id']}: {c} differs between its rows"


def test_per_gpu_throughput_times_gpus_is_system_throughput(table):
    _, rows = table
    num_gpus = {r["run_id"]: int(r["num_gpus"]) for r in rows}
    for run_id, m in _runs(rows).items():
        if "output_tokens_per_s_per_gpu" in m and "output_tokens_per_s" in m:
            assert m["output_tokens_per_s_per_gpu"] * num_gpus[run_id] == pytest.approx(
                m["output_tokens_per_s"], rel=0.01), run_id


def test_token_throughputs_agree_with_request_throughput(table):
    """With fixed lengths: output tokens/s <= requests/s * output_len (early stops only shorten outputs),
    total tokens/s >= output tokens/s, and total/output = (in + out)/out within the sources' rounding."""
    _, rows = table
    info = {r["run_id"]: r for r in rows}
    for run_id, m in _runs(rows).items():
        r = info[run_id]
        if "total_tokens_per_s" in m and "output_tokens_per_s" in m:
            assert m["total_tokens_per_s"] >= m["output_tokens_per_s"], run_id
        if r["output_len"] and "requests_per_s" in m and "output_tokens_per_s" in m:
            # Sources print requests/s to 2-3 significant figures: allow that rounding.
            bound = (m["requests_per_s"] + 0.5) * int(r["output_len"])
            assert m["output_tokens_per_s"] <= bound * 1.001, run_id
        if r["input_len"] and "requests_per_s" in m and "total_tokens_per_s" in m:
            per_request = int(r["input_len"]) + int(r["output_len"])
            assert m["total_tokens_per_s"] <= (m["requests_per_s"] + 0.5) * per_request * 1.001, run_id


def test_latencies_are_ordered(table):
    """A request's first token comes before its end; TPOT/ITL are below the mean end-to-end latency and
    are seconds, not milliseconds."""
    _, rows = table
    for run_id, m in _runs(rows).items():
        if "e2e_latency_mean_s" in m:
            for k in ("ttft_mean_s", "tpot_mean_s", "itl_mean_s"):
                if k in m:
                    assert m[k] < m["e2e_latency_mean_s"], run_id
        for k in ("tpot_mean_s", "tpot_p50_s", "itl_mean_s"):
            if k in m:
                # The slowest published mean TPOT here is 1.6 s (vLLM 0.6.3 on MI300X with Meta's FP8
                # checkpoint, dstack); a value in milliseconds read as seconds would be far above 5 s.
                assert m[k] < 5.0, f"{run_id}: {k} over 5 s per token is a unit slip"


def test_csv_is_what_the_builder_makes(table):
    """The CSV equals a fresh build from the transcriptions in data/validation/serving_sources/."""
    spec = importlib.util.spec_from_file_location("build_serving_runs", BUILDER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _, rows = table
    assert module.build() == rows


def test_readme_counts_match_the_file(table):
    """data/validation/README.md states the row and run counts of serving_runs.csv; keep them true."""
    import re
    _, rows = table
    text = (ROOT / "data" / "validation" / "README.md").read_text(encoding="utf-8")
    m = re.search(r"`serving_runs\.csv` holds ([\d,]+) published measurements \(([\d,]+) runs", text)
    assert m, "README lost its serving_runs.csv summary line"
    assert int(m.group(1).replace(",", "")) == len(rows)
    assert int(m.group(2).replace(",", "")) == len({r["run_id"] for r in rows})


def test_mlperf_rows_carry_their_submissions_configs(table):
    """What the MLPerf v4.1 configs state reaches the columns the twin reads: batch limits, FP8 KV cache,
    per-scenario engine settings (quoted flags in the notes), one replica layout per system."""
    _, rows = table
    mlperf = [r for r in rows if r["run_id"].startswith("mlperf4.1-")]
    assert mlperf
    for r in mlperf:
        assert r["precision"] in {"fp8", "nvfp4"} and r["kv_cache_dtype"] == "fp8", r["run_id"]
        assert r["tp"] and r["dp_replicas"], r["run_id"]
        assert int(r["tp"]) * int(r["pp"]) * int(r["dp_replicas"]) == int(r["num_gpus"]), r["run_id"]
        if "B200" in r["run_id"]:       # the B200 preview ran private code: no config class is published
            continue
        assert r["max_batch"], r["run_id"]
        if r["engine"] == "trtllm":
            assert "enable_chunked_context False" in r["notes"] and "--max_num_tokens=" in r["notes"]
        else:
            assert "enable_chunked_prefill False" in r["notes"] and "--max-num-batched-tokens" in r["notes"]
    b200 = [r for r in mlperf if "B200" in r["run_id"]]
    assert b200 and all(r["precision"] == "nvfp4" and "calibration.md" in r["notes"] for r in b200)
