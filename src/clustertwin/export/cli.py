"""Commands ``clustertwin trace`` (Chakra / Perfetto / JSON graph) and ``clustertwin sim`` (the
discrete-event replay), registered on the main app. Options are predict's, with the same names."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ..errors import PlanError

console = Console()


class TraceFormat(str, Enum):
    chakra = "chakra"
    perfetto = "perfetto"
    json = "json"


from ..cli_options import (ClusterOpt, FrameworkOpt, GlobalBatchOpt, GpnOpt, GpuOpt,  # noqa: E402
                           MicroBatchOpt, ModelOpt, NumGpusOpt, PlanOpt, PrecisionOpt, SeqLenOpt)


class Detail(str, Enum):
    op = "op"
    layer = "layer"


RanksOpt = typer.Option(None, "--ranks", help='global ranks shown in the timeline, e.g. "0,8,16" [default: one per stage]')
DetailOpt = typer.Option(Detail.op, "--detail", help="timeline events per op, or one per layer (smaller files)")


def _job(model, gpu, num_gpus, gpus_per_node, cluster, plan, micro_batch, global_batch, seq_len, precision, framework):
    """The TrainingJob predict would price for the same options (and the same defaults)."""
    from ..predict import (DEFAULT_GLOBAL_BATCH, DEFAULT_MICRO_BATCH, DEFAULT_MODEL, DEFAULT_PLAN, DEFAULT_SEQ_LEN,
                           make_training_job)
    if model is None and plan is None and cluster is None and gpu is None and num_gpus is None:
        plan = DEFAULT_PLAN
        micro_batch = micro_batch or DEFAULT_MICRO_BATCH
        global_batch = global_batch or DEFAULT_GLOBAL_BATCH
        seq_len = seq_len or DEFAULT_SEQ_LEN
    return make_training_job(model or DEFAULT_MODEL, gpu=gpu, num_gpus=num_gpus, cluster=cluster,
                             gpus_per_node=gpus_per_node, plan=plan, micro_batch=micro_batch,
                             global_batch=global_batch, seq_len=seq_len, precision=precision, framework=framework)


def _parse_ranks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    out = []
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(int(item))
        except ValueError:
            raise PlanError("ranks", f"{item!r} is not a rank", 'give global ranks separated by commas, e.g. "0,8"') from None
    if not out:
        raise PlanError("ranks", "no rank given", 'give global ranks separated by commas, e.g. "0,8"')
    return out


def _emit(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=float) + "\n")


def _fmt_s(t: float) -> str:
    from ..units import format_duration
    return format_duration(t)


def trace(model: Optional[str] = ModelOpt, gpu: Optional[str] = GpuOpt, num_gpus: Optional[int] = NumGpusOpt,
          gpus_per_node: Optional[int] = GpnOpt, cluster: Optional[str] = ClusterOpt, plan: Optional[str] = PlanOpt,
          micro_batch: Optional[int] = MicroBatchOpt, global_batch: Optional[int] = GlobalBatchOpt,
          seq_len: Optional[int] = SeqLenOpt, precision: Optional[str] = PrecisionOpt, framework: str = FrameworkOpt,
          fmt: Optional[TraceFormat] = typer.Option(None, "--format", "-f",
                                                    help="chakra (per-rank ET files) | perfetto | json"),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="chakra: a directory; perfetto and json: a file"),
          name: str = typer.Option("workload", "--name", help="chakra: file prefix, DIR/<name>.<rank>.et"),
          ranks: Optional[str] = RanksOpt, detail: Detail = DetailOpt,
          as_json: bool = typer.Option(False, "--json", help="print what was written as JSON")) -> None:
    """Export one iteration: Chakra execution traces per rank, a Perfetto timeline, or the graph as JSON."""
    from ..errors import DataError
    from ..workload.graph import build_graph
    if fmt is None:
        raise DataError("format", "missing", "give --format chakra, perfetto or json")
    if out is None:
        raise DataError("out", "missing", "give --out DIR for chakra, --out FILE.json for perfetto and json")
    job = _job(model, gpu, num_gpus, gpus_per_node, cluster, plan, micro_batch, global_batch, seq_len, precision,
               framework)
    graph = build_graph(job)
    if fmt == TraceFormat.chakra:
        from .chakra import write_chakra
        res = write_chakra(graph, out, name)
        if as_json:
            _emit(res.to_json())
            return
        console.print(f"wrote {res.files:,} Chakra traces ({res.bytes_written / 1e6:,.1f} MB) to {res.directory}/"
                      f"{res.name}.<rank>.et in {res.seconds:.1f} s")
        console.print(f"nodes per rank by stage: {', '.join(f'{n:,}' for n in res.nodes_per_stage)}")
        console.print(f"communicator groups: {res.groups_file}  (ASTRA-sim --comm-group-configuration)")
        return
    if fmt == TraceFormat.perfetto:
        from ..sim.replay import simulate
        from .perfetto import write_perfetto
        result = simulate(graph)
        n = write_perfetto(result, out, _parse_ranks(ranks), detail.value)
        if as_json:
            _emit({"schema": 1, "file": str(out), "events": n, "step_time_s": result.step_time_s})
            return
        console.print(f"wrote {n:,} events to {out} (step {_fmt_s(result.step_time_s)}); open it in https://ui.perfetto.dev")
        return
    from .graph_json import write_graph_json
    doc = write_graph_json(graph, out)
    if as_json:
        _emit({"schema": 1, "file": str(out), "ops": len(doc["ops"]), "stages": len(doc["stages"])})
        return
    console.print(f"wrote the workload graph ({len(doc['ops']):,} distinct ops, {len(doc['stages'])} stages) to {out}")


def sim(model: Optional[str] = ModelOpt, gpu: Optional[str] = GpuOpt, num_gpus: Optional[int] = NumGpusOpt,
        gpus_per_node: Optional[int] = GpnOpt, cluster: Optional[str] = ClusterOpt, plan: Optional[str] = PlanOpt,
        micro_batch: Optional[int] = MicroBatchOpt, global_batch: Optional[int] = GlobalBatchOpt,
        seq_len: Optional[int] = SeqLenOpt, precision: Optional[str] = PrecisionOpt, framework: str = FrameworkOpt,
        slow_rank: Optional[int] = typer.Option(None, "--slow-rank", help="a GPU whose compute runs slower"),
        slowdown: float = typer.Option(1.1, "--slowdown", help="how much slower the --slow-rank GPU computes (1.1 = 10%)"),
        timeline: Optional[Path] = typer.Option(None, "--timeline", help="also write the Perfetto timeline to this file"),
        ranks: Optional[str] = RanksOpt, detail: Detail = DetailOpt,
        as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
    """Replay one iteration as discrete events (per-rank streams, dependencies, collectives that wait for their
    group, shared links): step time and per-rank timeline; --slow-rank shows a straggler's effect."""
    from ..predict import predict_job
    from ..sim.replay import simulate
    job = _job(model, gpu, num_gpus, gpus_per_node, cluster, plan, micro_batch, global_batch, seq_len, precision,
               framework)
    result = simulate(job, slow_rank=slow_rank, slowdown=slowdown)
    predicted = predict_job(job).step_time_s
    events = None
    if timeline is not None:
        from .perfetto import write_perfetto
        events = write_perfetto(result, timeline, _parse_ranks(ranks), detail.value)
    if as_json:
        data = result.to_json()
        data["predicted_step_time_s"] = predicted
        if timeline is not None:
            data["timeline"] = {"file": str(timeline), "events": events}
        _emit(data)
        return
    g = result.graph
    console.print(f"{job.model.name} on {job.cluster.num_gpus:,} x {job.cluster.gpu.name} · {g.plan.short()} · "
                  f"{g.num_microbatches} micro-batches · {job.framework}")
    t = Table(show_header=False, title="replay of one iteration", title_justify="left")
    t.add_column("field", style="bold")
    t.add_column("value")
    base = result.baseline_step_time_s if result.baseline_step_time_s is not None else result.step_time_s
    t.add_row("step time (sim)", _fmt_s(base) + (" without the slow GPU" if result.slow_rank is not None else ""))
    t.add_row("step time (predict)", f"{_fmt_s(predicted)} (sim {100 * (base / predicted - 1):+.1f}%)")
    if result.slow_rank is not None:
        t.add_row("with the slow GPU", f"{_fmt_s(result.step_time_s)} ({100 * (result.step_time_s / base - 1):+.1f}%): "
                                       f"rank {result.slow_rank} computes {result.slowdown:g}x slower")
    t.add_row("simulated", f"{len(result.ranks)} ranks standing for {job.cluster.num_gpus:,} GPUs "
                           f"({result.tasks_simulated:,} tasks); TP/CP peers and DP replicas are symmetric")
    console.print(t)
    r = Table(title="per simulated rank", title_justify="left")
    for col in ("rank", "stage", "replica", "stands for", "busy", "idle", "after last bwd", "ends"):
        r.add_column(col, justify="right" if col not in ("replica",) else "left")
    for x in result.ranks:
        s = x.summary()
        r.add_row(str(x.rank), str(x.stage), x.replica + (" (slow GPU)" if x.rank == result.slow_rank else ""),
                  f"{x.represents:,}", _fmt_s(s["compute_busy_s"] + s["optimizer_s"]), _fmt_s(s["idle_s"]),
                  _fmt_s(s["end_s"] - s["last_backward_end_s"]), _fmt_s(s["end_s"]))
    console.print(r)
    if timeline is not None:
        console.print(f"timeline: {events:,} events in {timeline} (open in https://ui.perfetto.dev)")


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
    app.command("sim")(sim)
