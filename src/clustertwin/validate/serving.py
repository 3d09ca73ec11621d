"""Measured serving runs (the serving schema: shared/validation/SERVING.md, docs/serving.md) predicted
with the serving twin, row by row. A file is a serving file when its header has the columns ``engine``
and ``workload``. Every row is either predicted (with the assumptions made for its empty cells) or
reported with the reason it could not be. Nothing here is fitted to the rows: every figure is out of
sample.

>>> is_serving_header(["run_id", "engine", "workload", "metric", "value"])
True
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cost.profile import profile_assumption
from ..errors import ClusterTwinError, DataError
from .report_rows import ErrorRows

METRICS = ("output_tokens_per_s", "output_tokens_per_s_per_gpu", "total_tokens_per_s", "requests_per_s",
           "ttft_mean_s", "ttft_p50_s", "tpot_mean_s", "tpot_p50_s", "itl_mean_s", "e2e_latency_mean_s")
THROUGHPUT = ("output_tokens_per_s", "output_tokens_per_s_per_gpu", "total_tokens_per_s", "requests_per_s")
REQUIRED = ("run_id", "gpu", "num_gpus", "engine", "workload", "metric", "value")
# catalog preset of an arch the CSV columns cannot describe (MLA, shared experts, dense first layers)
_ARCH_PRESET = {"deepseek_v3": "deepseek-v3"}
# the row's arch -> the training schema's arch (its layer layout)
_ARCH_LAYOUT = {"llama": "llama", "gpt": "gpt", "mixtral": "mixtral", "qwen3_moe": "mixtral", "qwen2": "llama",
                "qwen3": "llama", "mistral": "llama", "deepseek": "deepseek"}
# the precision of a model's published checkpoint, served as such when a run names none
_PUBLISHED_PRECISION = {"deepseek_v3": ("fp8", "the published checkpoint: HF deepseek-ai/DeepSeek-V3 config.json "
                                               "quantization_config fp8, 128x128 blocks")}


def is_serving_header(columns: list[str] | None) -> bool:
    return bool(columns) and "engine" in columns and "workload" in columns   # type: ignore[operator]


def is_serving_csv(path: str | Path) -> bool:
    p = Path(path)
    if p.is_dir():      # `validate` asks this of every file first: a directory is one line here, not a traceback
        from ..errors import DataError
        raise DataError("file", f"{str(p)!r} is a directory", "give the CSV files in it, e.g. DIR/*.csv")
    if not p.exists():
        return False
    try:
        with p.open(newline="", encoding="utf-8") as f:
            return is_serving_header(csv.DictReader(f).fieldnames)   # type: ignore[arg-type]
    except (UnicodeDecodeError, csv.Error):
        from ..errors import DataError
        raise DataError("file", f"{p.name} is not a UTF-8 CSV", "give a CSV in the validation schema") from None


def family(metric: str) -> str:
    return "throughput" if metric in THROUGHPUT else "latency"


@dataclass
class ServingRow:
    run_id: str
    metric: str
    measured: float
    raw: dict
    line: int
    source: str = ""
    base_dir: Path | None = None      # the CSV's folder: serving_sources/lengths/ beside it holds run traces
    predicted: float | None = None
    reason: str = ""
    assumptions: list[str] = field(default_factory=list)

    @property
    def error(self) -> float | None:
        if self.predicted is None or not self.measured or not math.isfinite(self.measured):
            return None
        return (self.predicted - self.measured) / self.measured

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"run_id": self.run_id, "metric": self.metric, "family": family(self.metric),
                             "source": self.source, "measured": self.measured, "predicted": self.predicted,
                             "error": self.error}
        if self.reason:
            d["reason"] = self.reason
        if self.assumptions:
            d["assumptions"] = self.assumptions
        return d


@dataclass
class ServingReport(ErrorRows[ServingRow]):
    rows: list[ServingRow]

    def mape(self, fam: str | None = None) -> float:
        errs = [abs(r.error) for r in self.ok_rows if fam is None or family(r.metric) == fam]   # type: ignore[arg-type]
        return sum(errs) / len(errs) if errs else float("nan")

    def mape_by(self, key) -> dict[str, float]:
        return self._mape_by(key, sort=True)

    def bias_by(self, key, fam: str | None = None) -> dict[str, tuple[int, float, float]]:
        """Per group of predicted rows (``key(row)``; only metric family ``fam`` when given): (rows, mean
        signed error, MAPE). The sign says which way the twin misses: negative = predicted below measured
        (for latencies: too fast; for throughputs: too slow)."""
        groups: dict[str, list[float]] = {}
        for r in self.ok_rows:
            if fam is None or family(r.metric) == fam:
                groups.setdefault(str(key(r)), []).append(r.error)   # type: ignore[arg-type]
        return {k: (len(v), sum(v) / len(v), sum(abs(e) for e in v) / len(v)) for k, v in sorted(groups.items())}

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "kind": "serving", "rows": [r.to_json() for r in self.rows],
                "predicted": len(self.ok_rows), "unpredicted": len(self.failed_rows),
                "mape": {"throughput": self.mape("throughput"), "latency": self.mape("latency"), "all": self.mape()},
                "mape_by_metric": self.mape_by(lambda r: r.metric),
                "mape_by_source": self.mape_by(lambda r: r.source or "?")}


def read_serving_runs(path: str | Path) -> list[ServingRow]:
    p = Path(path)
    if not p.exists():
        raise DataError("file", f"{str(p)!r} not found", "give a CSV in the serving validation schema")
    with p.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if not is_serving_header(reader.fieldnames):   # type: ignore[arg-type]
            raise DataError("file", f"{p.name} is not a serving file (no engine and workload columns)",
                            "use the serving schema (docs/serving.md)")
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError("file", f"{p.name} lacks the column(s) {', '.join(missing)}",
                            "use the serving schema (docs/serving.md)")
        rows = []
        for i, r in enumerate(reader, start=2):
            try:
                v = float(r["value"])
            except (TypeError, ValueError):
                v = float("nan")
            rows.append(ServingRow(r["run_id"], (r["metric"] or "").strip(), v, r, i, (r.get("source") or "").strip(),
                                  p.resolve().parent))
    return rows


def _cell(r: dict, key: str) -> str:
    return (r.get(key) or "").strip()


def _int(r: dict, key: str) -> int | None:
    v = _cell(r, key)
    if not v:
        return None
    try:
        return int(float(v))
    except ValueError:
        raise DataError(key, f"{v!r} is not a number", "fix the cell or leave it empty") from None


def _float(r: dict, key: str) -> float | None:
    v = _cell(r, key)
    if not v:
        return None
    try:
        return float(v)
    except ValueError:
        raise DataError(key, f"{v!r} is not a number", "fix the cell or leave it empty") from None


def model_of(r: dict, notes: list[str]):
    """The row's model: the catalog preset its ``model`` names (checked against its layers and hidden),
    the preset of an arch the columns cannot describe, or a model built from the columns."""
    from ..catalog import load_model
    from .runs import model_from_row
    name = _cell(r, "model")
    arch = _cell(r, "arch").lower()
    candidates = [name] if name else []
    if arch in _ARCH_PRESET:
        candidates.append(_ARCH_PRESET[arch])
    for cand in candidates:
        try:
            m = load_model(cand)
        except ClusterTwinError:
            continue
        layers, hidden = _int(r, "layers"), _int(r, "hidden")
        if (layers is None or layers == m.num_layers) and (hidden is None or hidden == m.hidden_size):
            if cand != name:
                notes.append(f"model: the {cand} preset for arch {arch} (MLA and shared experts are not columns)")
            return m.model_copy(update={"max_seq_len": max(m.max_seq_len, 1_000_000)})
    if arch not in _ARCH_LAYOUT:
        raise DataError("arch", f"unknown arch {arch!r} and no catalog model named {name!r}",
                        f"use a catalog model name or arch {', '.join(sorted(_ARCH_LAYOUT))}")
    need = (_int(r, "input_len") or 0) + (_int(r, "output_len") or 0)
    row = dict(r, arch=_ARCH_LAYOUT[arch], seq_len=str(max(need, 4096)))
    return model_from_row(row, notes)


TRACE_DIR = Path("serving_sources") / "lengths"

# Meta's own FP8 checkpoints (meta-llama/Llama-3.1-405B-FP8 and its Instruct twin) quantize the feed-forward
# layers only (Llama 3 paper, arXiv 2407.21783, Sec. 6.2): a row serving one is priced as precision fp8-ffn
_META_FP8 = re.compile(r"meta-llama/(?:Meta-)?Llama-3\.1-\d+B(?:-Instruct)?-FP8(?![-\w])")

# engine flags a row's notes quote (the schema has no column for them): (pattern, what it sets)
_FLAGS = (
    (re.compile(r"enable_attention_dp|--enable-dp-attention"), "adp"),
    (re.compile(r"--num-scheduler-steps?[ =](\d+)"), "num_scheduler_steps"),
    (re.compile(r"--enforce-eager|--disable-cuda-graph"), "enforce_eager"),
    # the per-iteration token budget: vLLM --max-num-batched-tokens, TensorRT-LLM --max_num_tokens
    (re.compile(r"(?:--max-num-batched-tokens|--max_num_tokens)[ =](\d+)"), "max_num_batched_tokens"),
    (re.compile(r"--enable-chunked-prefill=False"), "chunked_prefill"),
    (re.compile(r"--max-model-len[ =](\d+)"), "max_model_len"),
    (re.compile(r"trtllm-serve --backend pytorch"), "engine_backend"),
    # the same setting named as the engines' config fields (vLLM EngineArgs.enable_chunked_prefill, TensorRT-LLM
    # executor enable_chunked_context) where a harness leaves it at its default False
    (re.compile(r"enable_chunked_(?:prefill|context)[ =]False"), "chunked_prefill"),
    # not a launch flag: how the run's server streamed a multi-step run, read from its own per-request data
    # and stated in the notes with that evidence (the schema has no column for it)
    (re.compile(r"multi_step_stream=step"), "multi_step_stream"),
)
# what a flag without a number sets
_FLAG_VALUE = {"chunked_prefill": False, "engine_backend": "pytorch", "multi_step_stream": "step"}


def engine_flags(r: dict, notes: list[str]) -> dict[str, Any]:
    """Engine options the row's ``notes`` state as launch flags: attention data parallelism, vLLM
    multi-step scheduling, no CUDA graphs, the per-iteration token budget, chunked prefill off, TensorRT-LLM's
    PyTorch backend."""
    text = _cell(r, "notes")
    out: dict[str, Any] = {}
    for pat, key in _FLAGS:
        m = pat.search(text)
        if not m:
            continue
        out[key] = int(m.group(1)) if m.groups() else _FLAG_VALUE.get(key, True)
        notes.append(f"notes: {m.group(0)} -> {key}")
    return out


_BATCHER = re.compile(r"--enable-batcher\b.*?--batcher-threshold[ =](\d+(?:\.\d+)?)(?: s)?.*?--gpu-batch-size[ =](\d+)")


def harness_batcher_of(r: dict, notes: list[str]) -> tuple[float, int] | None:
    """A harness-side batcher the row's notes describe (AMD's MLPerf harness, ``--enable-batcher`` with its
    ``--batcher-threshold`` seconds and ``--gpu-batch-size``): (threshold s, batch size), else None."""
    m = _BATCHER.search(_cell(r, "notes"))
    if not m:
        return None
    notes.append(f"notes: --enable-batcher, threshold {m.group(1)} s, batch {m.group(2)} -> harness_batcher")
    return float(m.group(1)), int(m.group(2))


MAX_REQUESTS = 5000              # requests simulated per row (offline, closed loop, static)
MAX_POISSON_REQUESTS = 300_000   # per Poisson row: MLPerf Server runs issue rate x >= 600 s


def trace_of(r: dict, base_dir: Path | None) -> Path | None:
    """The run's own per-request lengths, when published: ``serving_sources/lengths/<result file>.csv``
    beside the CSV (columns input_len, output_len), named after the file ``source_url`` points to."""
    url = _cell(r, "source_url")
    if base_dir is None or not url:
        return None
    stem = url.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[0]
    p = base_dir / TRACE_DIR / f"{stem}.csv"
    return p if stem and p.exists() else None


def request_of(r: dict, notes: list[str], base_dir: Path | None = None):
    """The ServeRequest that reproduces the row; empty cells get the stated assumptions. A row whose
    lengths vary (``dataset`` named, lengths empty) replays the run's published per-request lengths when
    there are some (``trace_of``), else draws from the named distribution (serve/dataset.py), else is
    refused with what is not published."""
    from ..serve import dataset as datasets
    from ..serve.run import ServeRequest
    workload = _cell(r, "workload").lower()
    if workload not in ("offline", "concurrency", "poisson", "static"):
        raise DataError("workload", f"unknown workload {workload!r}", "use offline, concurrency, poisson or static")
    inp, out = _int(r, "input_len"), _int(r, "output_len")
    lengths: dict[str, Any] = {"input_len": inp, "output_len": out}
    if inp is None or out is None:
        ds = _cell(r, "dataset")
        trace = trace_of(r, base_dir)
        if trace is not None:
            lengths = {"dataset_file": trace}
            notes.append(f"lengths: the run's own per-request input and output lengths ({TRACE_DIR / trace.name}; "
                         "a request that generated 0 tokens counts 1, the end-of-sequence token)")
        elif ds:
            why = datasets.missing(ds, out)
            if why:
                raise DataError("dataset", why, "fill input_len and output_len with the run's mean lengths")
            lengths = {"dataset": ds, "output_len": out}
        else:
            raise DataError("input_len", "lengths vary (no dataset named) and no per-request lengths are given",
                            "fill input_len and output_len with the run's mean lengths")
    tp, pp, ep = (_int(r, k) or 1 for k in ("tp", "pp", "ep"))
    num_gpus = _int(r, "num_gpus")
    if num_gpus is None:
        raise DataError("num_gpus", "empty", "fill the GPUs serving the workload")
    dp = _int(r, "dp_replicas")
    if dp is None:
        dp = max(1, num_gpus // (tp * pp))
        notes.append(f"dp_replicas empty: assumed num_gpus / (tp*pp) = {dp}")
    precision = _cell(r, "precision").lower()
    if precision == "fp8" and _META_FP8.search(_cell(r, "notes")):
        precision = "fp8-ffn"
        notes.append("precision: Meta's FP8 checkpoint -> fp8-ffn (feed-forward GEMMs of the inner layers in FP8, "
                     "attention and the first and last layers 16-bit: Llama 3 paper, arXiv 2407.21783, Sec. 6.2)")
    if not precision:
        arch = _cell(r, "arch").lower()
        precision, why = _PUBLISHED_PRECISION.get(arch, ("bf16", "16-bit weights"))
        notes.append(f"precision empty: assumed {precision} ({why})")
    kv = _cell(r, "kv_cache_dtype").lower() or None
    max_batch = _int(r, "max_batch")
    conc, rate = _int(r, "concurrency"), _float(r, "request_rate")
    n = _int(r, "num_requests")
    kw: dict[str, Any] = {}
    if workload == "concurrency":
        if not conc:
            raise DataError("concurrency", "empty for a closed-loop row", "fill the requests in flight")
        kw["concurrency"] = conc
        if n is None:
            n = max(200, 5 * conc)
            notes.append(f"num_requests empty: assumed {n} (5 x concurrency, at least 200)")
    elif workload == "poisson":
        if not rate:
            raise DataError("request_rate", "empty for a Poisson row", "fill the request rate")
        kw["request_rate"] = rate
    elif workload == "static":
        if not max_batch:
            raise DataError("max_batch", "empty for a static-batch row", "fill the batch size")
        n = max_batch
    if n is None:
        n = 1000
        notes.append("num_requests empty: assumed 1000")
    # simulated requests: a closed loop or an offline batch reaches its steady state within a few thousand
    # requests; an open (Poisson) loop near saturation fills its batch only after about one end-to-end
    # latency of arrivals and drains for as long after the last, so its row simulates the whole measured run
    n = min(n, MAX_POISSON_REQUESTS if workload == "poisson" else MAX_REQUESTS)
    gpu = _cell(r, "gpu")
    if not gpu:
        raise DataError("gpu", "empty", "fill the catalog GPU name")
    flags = engine_flags(r, notes)
    batcher = harness_batcher_of(r, notes)
    if batcher is not None:
        flags["harness_batcher"] = batcher
    adp = tp if flags.pop("adp", False) and tp > 1 else 1
    return ServeRequest(model=model_of(r, notes), gpu=gpu, num_gpus=tp * pp * dp, **flags,
                        plan=f"tp={tp},pp={pp},ep={ep},dp={dp},adp={adp}", engine=_cell(r, "engine") or "vllm",
                        engine_version=_cell(r, "engine_version") or None, precision=precision, kv_cache_dtype=kv, workload=workload,
                        num_requests=n, max_num_seqs=max_batch, **lengths, **kw)


def predicted_metric(res, metric: str) -> float:
    if metric == "output_tokens_per_s":
        return res.output_tokens_per_s
    if metric == "output_tokens_per_s_per_gpu":
        return res.output_tokens_per_s / res.setup.num_gpus
    if metric == "total_tokens_per_s":
        return res.total_tokens_per_s
    if metric == "requests_per_s":
        return res.requests_per_s
    name, stat = {"ttft_mean_s": ("ttft_s", "mean"), "ttft_p50_s": ("ttft_s", "p50"),
                  "tpot_mean_s": ("tpot_s", "mean"), "tpot_p50_s": ("tpot_s", "p50"),
                  "itl_mean_s": ("itl_s", "mean"), "e2e_latency_mean_s": ("e2e_latency_s", "mean")}[metric]
    return res.latency(name)[stat]


_SKIP = {"run_id", "metric", "value", "source", "source_url", "notes"}


def validate_serving(rows: list[ServingRow], progress=None) -> ServingReport:
    """Predict every row (rows of one run share one simulation); unpredictable rows keep their reason."""
    from ..serve.run import predict_serving
    cache: dict[tuple, Any] = {}
    for i, row in enumerate(rows):
        if progress:
            progress(i, len(rows))
        if row.metric not in METRICS:
            row.reason = f"unknown metric {row.metric!r} (not in the serving schema)"
            continue
        if not math.isfinite(row.measured) or row.measured <= 0:
            row.reason = "value is not a positive number"
            continue
        key = tuple(sorted((k, (v or "").strip()) for k, v in row.raw.items() if k and k not in _SKIP))
        key += (str(trace_of(row.raw, row.base_dir)),)
        got: tuple[Any, list[str], str] | None = cache.get(key)
        if got is None:
            notes: list[str] = []
            try:
                q = request_of(row.raw, notes, row.base_dir)
                pred = predict_serving(q)
                hardware = profile_assumption(pred.setup.cluster.gpu, pred.setup.profile)  # Blackwell (issue 16)
                if hardware:
                    notes.append(hardware)
                got = (pred, notes, "" if pred.fits else f"does not fit: {pred.memory.reason or 'requests never finish'}")
            except ClusterTwinError as e:
                got = (None, notes, e.one_line())
            cache[key] = got
        res, notes, reason = got
        row.assumptions = list(notes)
        if res is None or reason:
            row.reason = reason
            continue
        v = predicted_metric(res, row.metric)
        if not math.isfinite(v):
            row.reason = f"the simulation gives no {row.metric} (e.g. one output token: no TPOT)"
            continue
        row.predicted = v
    if progress:
        progress(len(rows), len(rows))
    return ServingReport(rows)


__all__ = ["is_serving_csv", "is_serving_header", "read_serving_runs", "validate_serving", "ServingReport",
           "ServingRow", "METRICS", "THROUGHPUT", "family"]
