"""Commands ``clustertwin trace`` (Chakra / Perfetto / JSON graph) and ``clustertwin sim`` (the
discrete-event replay), registered on the main app. The job options are every command's
(cli_options.job_options): the same names, defaults and checks as predict."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..cli_options import job_options
from ..errors import PlanError
from ..jobs import JobOptions
from ..units import format_duration

console = Console()


class TraceFormat(str, Enum):
    chakra = "chakra"
    perfetto = "perfetto"
    json = "json"


class Detail(str, Enum):
    op = "op"
    layer = "layer"


RanksOpt = typer.Option(None, "--ranks", help='global ranks shown in the timeline, e.g. "0,8,16" [default: one per stage]')
DetailOpt = typer.Option(Detail.op, "--detail", help="timeline events per op, or one per layer (smaller files)")


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


@job_options(profile=True)
def trace(job: JobOptions, profile: Optional[Path],
          fmt: Optional[TraceFormat] = typer.Option(None, "--format", "-f",
                                                    help="chakra (per-rank ET files) | perfetto | json"),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="chakra: a directory; perfetto and json: a file"),
          name: str = typer.Option("workload", "--name", help="chakra: file prefix, DIR/<name>.<rank>.et"),
          layout: str = typer.Option("auto", "--layout",
                                     help="chakra: files (one per rank), compact (one template per pipeline "
                                          "stage; `trace-expand` writes ranks), auto (compact above 4,096 ranks)"),
          ranks: Optional[str] = RanksOpt, detail: Detail = DetailOpt,
          as_json: bool = typer.Option(False, "--json", help="print what was written as JSON")) -> None:
    """Export one iteration: Chakra execution traces per rank, a Perfetto timeline, or the graph as JSON."""
    from ..errors import DataError
    from ..jobs import job_from_options
    from ..predict import resolve_profile
    from ..workload.graph import build_graph
    if fmt is None:
        raise DataError("format", "missing", "give --format chakra, perfetto or json")
    if out is None:
        raise DataError("out", "missing", "give --out DIR for chakra, --out FILE.json for perfetto and json")
    tj = job_from_options(job)
    prof = resolve_profile(profile, tj)
    graph = build_graph(tj)
    if fmt == TraceFormat.chakra:
        from .chakra import write_chakra
        pricer = None
        if prof is not None:
            from ..schedule.step import Pricer
            pricer = Pricer(graph, prof)
        res = write_chakra(graph, out, name, pricer=pricer, layout=layout)
        if as_json:
            _emit(res.to_json())
            return
        if res.layout == "files":
            console.print(f"wrote {res.files:,} Chakra traces ({res.bytes_written / 1e6:,.1f} MB) to "
                          f"{res.directory}/{res.name}.<rank>.et in {res.seconds:.1f} s")
        else:
            console.print(f"wrote {res.files:,} stage templates for {res.ranks:,} ranks ({res.bytes_written / 1e6:,.1f} MB)"
                          f" to {res.directory}/{res.name}.stage<i>.ctet in {res.seconds:.1f} s; per-rank files: "
                          f"clustertwin trace-expand {res.directory} --name {res.name} [--ranks 0-7] [--out DIR]")
        console.print(f"nodes per rank by pipeline position: {', '.join(f'{n:,}' for n in res.nodes_per_stage)}")
        console.print(f"ASTRA-sim: configs and the command in {res.directory}/{res.name}.README.md")
        return
    if fmt == TraceFormat.perfetto:
        from ..sim.replay import simulate
        from .perfetto import write_perfetto
        result = simulate(graph, profile=prof)
        n = write_perfetto(result, out, _parse_ranks(ranks), detail.value)
        if as_json:
            _emit({"schema": 1, "file": str(out), "events": n, "step_time_s": result.step_time_s})
            return
        console.print(f"wrote {n:,} events to {out} (step {format_duration(result.step_time_s)}); "
                      "open it in https://ui.perfetto.dev")
        return
    from .graph_json import write_graph_json
    doc = write_graph_json(graph, out, prof)
    if as_json:
        _emit({"schema": 1, "file": str(out), "ops": len(doc["ops"]), "stages": len(doc["stages"])})
        return
    console.print(f"wrote the workload graph ({len(doc['ops']):,} distinct ops, {len(doc['stages'])} stages) to {out}")


@job_options(profile=True)
def sim(job: JobOptions, profile: Optional[Path],
        slow_rank: Optional[int] = typer.Option(None, "--slow-rank", help="a GPU whose compute runs slower"),
        slowdown: Optional[float] = typer.Option(None, "--slowdown", help="how much slower the --slow-rank GPU "
                                                 "computes (1.1 = 10%) [default: 1.1]"),
        timeline: Optional[Path] = typer.Option(None, "--timeline", help="also write the Perfetto timeline to this file"),
        ranks: Optional[str] = RanksOpt, detail: Detail = DetailOpt,
        as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
    """Replay one iteration as discrete events (per-rank streams, dependencies, collectives that wait for their
    group, shared links): step time and per-rank timeline; --slow-rank shows a straggler's effect."""
    from ..jobs import job_from_options
    from ..predict import predict_job, resolve_profile
    from ..report.console import print_all, sim_tables
    from ..sim.replay import simulate
    if slowdown is not None and slow_rank is None:   # it would slow no GPU: refused, not ignored
        from ..errors import SpecError
        raise SpecError("slowdown", "given without --slow-rank, so it would slow no GPU",
                        "add --slow-rank N (the GPU it slows), or drop --slowdown")
    tj = job_from_options(job)
    prof = resolve_profile(profile, tj)
    result = simulate(tj, slow_rank=slow_rank, slowdown=1.1 if slowdown is None else slowdown, profile=prof)
    pred = predict_job(tj, prof)
    predicted = pred.step_time_s
    # the replay runs every GPU at the mean speed (a slow one only by --slow-rank): it compares with
    # predict's step less its expected wait for the slowest GPU
    waits = pred.breakdown_s.get("stragglers", 0.0)
    events = None
    if timeline is not None:
        from .perfetto import write_perfetto
        events = write_perfetto(result, timeline, _parse_ranks(ranks), detail.value)
    if as_json:
        data = result.to_json()
        data["predicted_step_time_s"] = predicted
        data["predicted_stragglers_s"] = waits
        data["fits"] = pred.fits
        data["memory_per_gpu_bytes"] = pred.memory.total_bytes
        if timeline is not None:
            data["timeline"] = {"file": str(timeline), "events": events}
        _emit(data)
        return
    print_all(console, sim_tables(result, predicted, pred.memory, waits))
    if timeline is not None:
        console.print(f"timeline: {events:,} events in {timeline} (open in https://ui.perfetto.dev)")


def _check_ranks_text(text: str) -> None:
    """What parse_ranks would answer vaguely ("none is not a rank"): an empty list or a reversed range."""
    import re
    items = [x.strip() for x in text.replace(";", ",").split(",") if x.strip()]
    if not items:
        raise PlanError("ranks", "no rank given", 'give e.g. "0,8,16-23" or "all"')
    for x in items:
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", x)
        if m and int(m.group(1)) > int(m.group(2)):
            raise PlanError("ranks", f"{x!r} runs backwards", f'write "{m.group(2)}-{m.group(1)}"')


def trace_expand(directory: Path = typer.Argument(..., help="the directory `trace --format chakra` wrote"),
                 name: str = typer.Option("workload", "--name", help="the file prefix given to trace"),
                 ranks: str = typer.Option("all", "--ranks", help='ranks to write, e.g. "0-7,64" [default: all]'),
                 out: Optional[Path] = typer.Option(None, "--out", "-o", help="where to write [default: DIRECTORY]"),
                 as_json: bool = typer.Option(False, "--json", help="print what was written as JSON")) -> None:
    """Write per-rank Chakra traces (<name>.<rank>.et) from a compact export (one template per stage)."""
    from .chakra import expand, parse_ranks
    from ..errors import DataError
    try:
        world = json.loads((directory / f"{name}.manifest.json").read_text(encoding="utf-8"))["ranks"]
    except (OSError, ValueError, KeyError, TypeError):
        raise DataError("directory", f"no clustertwin Chakra export named {name!r} in {str(directory)!r}",
                        "give the directory and --name that `clustertwin trace --format chakra` wrote") from None
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise DataError("directory", f"{name}.manifest.json gives {world!r} ranks",
                        "export again with `clustertwin trace --format chakra --layout compact`")
    _check_ranks_text(ranks)
    if out is not None and out.exists() and not out.is_dir():
        raise DataError("out", f"{str(out)!r} is a file", "give a directory (it is made if missing)")
    selected = parse_ranks(ranks, world)
    try:
        dst, files, nbytes = expand(directory, name, selected, out)
    except OSError as e:
        raise DataError("out", f"cannot write the traces ({e.strerror or e})",
                        "give a directory that is writable and has room") from None
    if as_json:
        _emit({"schema": 1, "directory": str(dst), "files": files, "bytes_written": nbytes})
        return
    console.print(f"wrote {files:,} Chakra traces ({nbytes / 1e6:,.1f} MB) to {dst}/{name}.<rank>.et")


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
    app.command("trace-expand")(trace_expand)
    app.command("sim")(sim)
