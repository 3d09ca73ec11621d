"""Sweeps: a grid of searches (models x clusters x global batches x sequence lengths x objectives),
written as Parquet that DuckDB reads.

A spec (YAML)::

    models: [gpt3-175b, llama3-70b]
    clusters:                          # a GPU and a count, or a preset (optionally resized)
      - {gpu: h100-sxm, num_gpus: [512, 1024]}
      - {cluster: eos}
    global_batch: [1024, 2048]
    seq_len: 4096                      # one value or a list; empty: the model's, at most 8192
    objectives: [time, cost]
    top: 5                             # plans kept per cell
    gpu_hour_price: 2.5                # USD, for the cost objective
    tokens: 15T                        # for goodput and time to train
    output: sweep-out/                 # relative to the spec; --output overrides

Each cell is written to its own file, ``cell-<id>.parquet``, named by a hash of everything that
defines the cell, through a temporary file renamed into place: a cell is either wholly there or
not at all. A sweep killed at any moment and started again skips the cells whose file exists and
runs the rest; nothing is redone, nothing duplicated. Every cell's inputs are checked before the first
cell runs (a misspelt model, FP8 on an A100: one line, exit 2). A cell whose search fails (no plan
fits, say) is finished too: its file holds one row with ``status = 'error'`` and the reason.

``time_to_train_s`` and ``cost_usd`` mean what ``time_to_train_basis`` says: steps x step time under
the time objective, the expected time with failures under cost and goodput; the columns
``ideal_time_to_train_s`` (steps x the step with every GPU at the mean speed, goodput's ideal: the step
less its ``stragglers`` part) and ``expected_time_to_train_s`` hold each where it is known.

    SELECT model, num_gpus, global_batch, plan, step_time_s, mfu
    FROM read_parquet('sweep-out/*.parquet') WHERE status = 'ok' AND rank = 1 ORDER BY model, num_gpus;
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..catalog import read_data_file
from ..errors import ClusterTwinError, DataError, SpecError
from ..specs.plan import first_error
from ..units import parse_quantity
from .executors import make_executor
from .tuner import OBJECTIVES

SCHEMA_VERSION = 1


class ClusterEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu: Optional[str] = None
    cluster: Optional[str] = None
    num_gpus: Union[int, list[int], None] = None
    gpus_per_node: Optional[int] = Field(None, gt=0)

    def expand(self) -> list[dict]:
        if (self.gpu is None) == (self.cluster is None):
            raise SpecError("clusters", "each entry needs exactly one of gpu and cluster",
                            "write {gpu: h100-sxm, num_gpus: 1024} or {cluster: eos}")
        if self.gpu is not None and self.num_gpus is None:
            raise SpecError("clusters.num_gpus", f"missing for gpu {self.gpu}", "add num_gpus: N (or a list)")
        counts = self.num_gpus if isinstance(self.num_gpus, list) else [self.num_gpus]
        return [{"gpu": self.gpu, "cluster": self.cluster, "num_gpus": n, "gpus_per_node": self.gpus_per_node}
                for n in counts]


def _listed(v):
    return v if isinstance(v, list) else [v]


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    models: list[str] = Field(min_length=1)
    clusters: list[ClusterEntry] = Field(min_length=1)
    global_batch: list[int] = Field(min_length=1)
    seq_len: list[Optional[int]] = Field(default_factory=lambda: [None])
    objectives: list[str] = Field(default_factory=lambda: ["time"])
    precision: str = "bf16"
    framework: str = "megatron"
    top: int = Field(5, gt=0, le=1000)
    max_memory_fraction: float = Field(1.0, gt=0, le=1)
    fix: Union[str, dict, None] = None
    tokens: Optional[float] = Field(None, gt=0)
    gpu_hour_price: Optional[float] = Field(None, gt=0)
    pareto_points: int = Field(1, ge=1, le=16)
    output: Optional[str] = None

    _lists = field_validator("models", "global_batch", "seq_len", "objectives", "clusters", mode="before")(
        classmethod(lambda cls, v: _listed(v)))

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, v):
        return None if v is None else parse_quantity(v, "count", "tokens")

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, v):
        for o in v:
            if o not in OBJECTIVES:
                raise SpecError("objectives", f"unknown objective {o!r}", f"use {', '.join(OBJECTIVES)}")
        return v

    def cells(self) -> list[dict]:
        clusters = [c for entry in self.clusters for c in entry.expand()]
        out = []
        for model, cl, gb, seq, obj in itertools.product(self.models, clusters, self.global_batch, self.seq_len,
                                                         self.objectives):
            cell = {"model": model, **cl, "global_batch": gb, "seq_len": seq, "objective": obj,
                    "precision": self.precision, "framework": self.framework, "top": self.top,
                    "max_memory_fraction": self.max_memory_fraction, "fix": self.fix, "tokens": self.tokens,
                    "gpu_hour_price": self.gpu_hour_price, "pareto_points": self.pareto_points}
            cell["cell_id"] = cell_id(cell)
            out.append(cell)
        return out


@dataclass
class Sweep:
    spec: SweepSpec
    path: Path | None = None

    @property
    def default_output(self) -> Path:
        if self.spec.output:
            base = self.path.parent if self.path else Path(".")
            return base / self.spec.output
        return (self.path.with_suffix(".parquet") if self.path else Path("sweep.parquet"))


def load_spec(path: str | Path) -> Sweep:
    p = Path(path)
    data = read_data_file(p, "spec")
    if not isinstance(data, dict):
        raise DataError("spec", f"{p.name} does not hold a mapping", "write models:, clusters:, global_batch: ...")
    return Sweep(make_spec(data), p)


def make_spec(data: dict) -> SweepSpec:
    try:
        return SweepSpec(**data)
    except ValidationError as e:
        raise SpecError(*first_error(e, "spec")) from None


def cell_id(cell: dict) -> str:
    """A stable name for a cell: a hash of everything that defines it."""
    key = {k: v for k, v in cell.items() if k != "cell_id"}
    text = json.dumps({"schema": SCHEMA_VERSION, **key}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---- one cell ------------------------------------------------------------------------------------
_INT_COLS = ("num_gpus", "global_batch", "seq_len", "evaluated", "feasible", "rank", "plan_num_gpus", "tp", "pp",
             "vpp", "dp", "cp", "ep", "zero_stage", "micro_batch")
_FLOAT_COLS = ("elapsed_s", "step_time_s", "mfu", "tflops_per_gpu", "tokens_per_s", "memory_per_gpu_bytes",
               "hbm_bytes", "time_to_train_s", "cost_usd", "goodput", "ideal_time_to_train_s",
               "expected_time_to_train_s")
_BOOL_COLS = ("sp", "overlap_dp_comm", "overlap_param_gather", "overlap_tp_comm", "overlap_pp_comm")
# time_to_train_basis says what time_to_train_s and cost_usd are: "expected_time_to_train" (failures,
# checkpoints and restarts counted: cost and goodput objectives with tokens), "steps_x_step_time" (the
# predicted step, its wait for the slowest GPU included: the time objective with tokens), "per_step" (cost of one step, no tokens) or null
_STR_COLS = ("cell_id", "model", "cluster", "gpu", "precision", "framework", "objective", "status", "error", "plan",
             "recompute", "bottleneck", "time_to_train_basis")


def _search_kwargs(cell: dict) -> dict[str, Any]:
    return dict(gpu=cell.get("gpu"), num_gpus=cell.get("num_gpus"), cluster=cell.get("cluster"),
                gpus_per_node=cell.get("gpus_per_node"), global_batch=cell["global_batch"],
                seq_len=cell.get("seq_len"), precision=cell["precision"], framework=cell["framework"],
                fix=cell.get("fix"), max_memory_fraction=cell["max_memory_fraction"], top=cell["top"],
                objective=cell["objective"], tokens=cell.get("tokens"), gpu_hour_price=cell.get("gpu_hour_price"),
                pareto_points=cell["pareto_points"])


def check_cells(cells: list[dict]) -> None:
    """Every cell's inputs (model, cluster, batch, precision, fix, objective) checked before the first
    cell runs: a misspelt model stops the sweep with one line, not an error row among results.
    What only the search can tell (no plan fits) stays a cell's error row."""
    from .tuner import prepare_search
    seen: set[str] = set()
    for cell in cells:
        kwargs = _search_kwargs(cell)
        key = json.dumps({"model": cell["model"], **kwargs}, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        try:
            prepare_search(cell["model"], **kwargs)
        except ClusterTwinError as e:
            where = cell.get("cluster") or f"{cell.get('num_gpus')} x {cell.get('gpu')}"
            e.field = f"spec.{e.field}" if e.field else "spec"
            e.problem = (f"{e.problem} (in the cell {cell['model']} on {where}, global batch {cell['global_batch']}, "
                         f"objective {cell['objective']})")
            e.args = (e.one_line(),)
            raise e from None


def require_pyarrow() -> None:
    """Parquet needs pyarrow (the ``sweep`` extra): checked before any cell is computed."""
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise DataError("output", "writing the sweep's Parquet needs pyarrow, which is not installed",
                        "pip install 'clustertwin[sweep]' (or pyarrow)") from None


def run_cell(cell: dict) -> list[dict]:
    """Search one cell; the rows to write (one per plan kept, or one error row)."""
    from .tuner import plan_text, search
    base = {k: cell.get(k) for k in ("cell_id", "model", "num_gpus", "global_batch", "seq_len", "objective",
                                     "precision", "framework")}
    base["cluster"] = cell.get("cluster") or ""
    base["gpu"] = cell.get("gpu") or ""
    t0 = time.perf_counter()
    try:
        r = search(cell["model"], **_search_kwargs(cell))
    except ClusterTwinError as e:
        return [{**base, "status": "error", "error": e.one_line(), "elapsed_s": time.perf_counter() - t0}]
    s = r.space
    base.update(cluster=s.cluster.name, gpu=s.cluster.gpu.name, num_gpus=s.num_gpus, seq_len=s.seq_len,
                evaluated=r.evaluated, feasible=r.feasible, elapsed_s=r.elapsed_s, status="ok", error="",
                time_to_train_basis=r.cost_basis)
    rows = []
    for p in r.plans:
        pred, plan = p.prediction, p.prediction.graph.plan
        rows.append({**base, "rank": p.rank, "plan": plan_text(pred), "plan_num_gpus": p.num_gpus,
                     **{k: getattr(plan, k) for k in ("tp", "pp", "vpp", "dp", "cp", "ep", "zero_stage",
                                                      "micro_batch", "recompute", *_BOOL_COLS)},
                     "step_time_s": pred.step_time_s, "mfu": pred.mfu, "tflops_per_gpu": pred.tflops_per_gpu,
                     "tokens_per_s": pred.tokens_per_s, "memory_per_gpu_bytes": pred.memory.total_bytes,
                     "hbm_bytes": pred.memory.capacity_bytes, "bottleneck": p.bottleneck,
                     "time_to_train_s": p.time_to_train_s, "cost_usd": p.cost_usd, "goodput": p.goodput,
                     "ideal_time_to_train_s": p.ideal_time_to_train_s,
                     "expected_time_to_train_s": p.expected_time_to_train_s})
    return rows


def _schema():
    import pyarrow as pa
    fields = ([pa.field(c, pa.string()) for c in _STR_COLS] + [pa.field(c, pa.int64()) for c in _INT_COLS]
              + [pa.field(c, pa.float64()) for c in _FLOAT_COLS] + [pa.field(c, pa.bool_()) for c in _BOOL_COLS])
    return pa.schema(fields)


def write_part(out_dir: Path, cell: dict, rows: list[dict]) -> Path:
    """Write a cell's rows to ``cell-<id>.parquet`` atomically (temporary file, then rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    schema = _schema()
    table = pa.Table.from_pylist([{name: r.get(name) for name in schema.names} for r in rows], schema=schema)
    final = out_dir / f"cell-{cell['cell_id']}.parquet"
    tmp = out_dir / f".cell-{cell['cell_id']}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    return final


# ---- the sweep -----------------------------------------------------------------------------------
@dataclass
class SweepSummary:
    output: Path
    cells: int
    already_done: int
    computed: int
    failed: int
    elapsed_s: float
    executor: str

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "output": str(self.output), "cells": self.cells, "already_done": self.already_done,
                "computed": self.computed, "failed": self.failed, "elapsed_s": self.elapsed_s,
                "executor": self.executor}

    def describe(self) -> str:
        return (f"{self.cells} cells: {self.already_done} already done, {self.computed} computed "
                f"({self.failed} ended in an error row) in {self.elapsed_s:.1f} s on {self.executor}; "
                f"Parquet in {self.output}/ (query: SELECT * FROM read_parquet('{self.output}/*.parquet'))")


def pending_cells(sweep: Sweep, out_dir: Path) -> tuple[list[dict], int]:
    cells = sweep.spec.cells()
    done = {p.name[len("cell-"):-len(".parquet")] for p in out_dir.glob("cell-*.parquet")}
    return [c for c in cells if c["cell_id"] not in done], sum(c["cell_id"] in done for c in cells)


def run_sweep(sweep: Sweep, output: Path | None = None, *, executor: str = "local", workers: int | None = None,
              ray_address: str | None = None, progress: bool = False) -> SweepSummary:
    """Run the cells of ``sweep`` not yet in ``output`` (a directory of Parquet parts)."""
    t0 = time.perf_counter()
    out_dir = Path(output) if output is not None else sweep.default_output
    if out_dir.exists() and not out_dir.is_dir():
        raise DataError("output", f"{str(out_dir)!r} exists and is not a directory", "give a directory for the parts")
    require_pyarrow()                   # before any cell: not a traceback after the first one
    check_cells(sweep.spec.cells())     # every cell's inputs, before the first is computed
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:    # a parent that is a file, no permission, a read-only file system
        raise DataError("output", f"cannot create {str(out_dir)!r} ({e.strerror or e})",
                        "give a directory you can write, e.g. -o out/sweep/") from None
    ex = make_executor(executor, workers, ray_address)
    for tmp in out_dir.glob(".cell-*.tmp-*"):  # left by a sweep killed while writing
        tmp.unlink(missing_ok=True)
    todo, done = pending_cells(sweep, out_dir)
    failed = 0
    with _progress(progress, len(todo)) as bar:
        task = bar.add_task("cells", total=len(todo) + done, completed=done)
        for cell, rows in ex.map_unordered(run_cell, todo):
            write_part(out_dir, cell, rows)
            failed += rows[0]["status"] != "ok"
            bar.advance(task)
    return SweepSummary(out_dir, len(todo) + done, done, len(todo), failed, time.perf_counter() - t0, executor)


def _progress(enabled: bool, total: int):
    if not enabled or not total:
        return _NoProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ..progress import stderr_console    # never on stdout: the summary (or --json) goes there
    return Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=stderr_console())


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, *a, **k):
        return None

    def advance(self, *a, **k):
        pass
