"""``clustertwin compare-trace``: measured steps of PyTorch profiler traces beside the prediction."""
from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import typer

from ..cli_options import job_options
from ..jobs import JobOptions


def _ms(s: float) -> str:
    return f"{s * 1e3:,.2f}"


def _ratio(p: float, m: float) -> str:
    return f"{p / m:.2f}" if m > 0 and p > 0 else "-"


@job_options(profile=True)
def compare_trace(job: JobOptions, profile: Optional[Path],
                  traces: List[Path] = typer.Argument(..., help="PyTorch profiler (Kineto) traces, .json or .json.gz, of "
                                                             "one or more ranks; or Chakra host + device traces",
                                                      show_default=False, metavar="TRACE..."),
                  top: int = typer.Option(10, "--top", help="rows of the per-op tables"),
                  stage: Optional[int] = typer.Option(None, "--stage", help="pipeline stage the traced rank(s) "
                                                      "ran (0-based); default: the stage of the traces' rank in "
                                                      "Megatron's rank order (pp outermost), else 0"),
                  perfetto: Optional[Path] = typer.Option(None, "--perfetto", help="also write a Perfetto/Chrome "
                                                          "timeline (JSON): one measured step per trace above the "
                                                          "predicted iteration (clustertwin's replay)"),
                  as_json: bool = typer.Option(False, "--json", help="print the comparison as JSON")) -> None:
    """Compare PyTorch profiler traces of real steps with clustertwin's prediction of the job given by the
    flags: per GEMM shape and collective size, per kernel category, and the step's breakdown
    (measured exposed vs overlapped communication included). --gpu and --num-gpus default to the
    traces' device and world size."""
    from rich.console import Console

    from ..calibrate.from_trace import trace_gpu
    from ..jobs import job_from_options
    from ..predict import resolve_profile
    from ..report.console import Col, Fit, print_all
    from .compare import compare_traces
    from .kineto import read_traces
    _check_inputs(traces, top)
    tr = read_traces(traces)
    if job.gpu is None and job.cluster is None and trace_gpu(tr[0]):
        job = replace(job, gpu=trace_gpu(tr[0]))
    if job.num_gpus is None and job.cluster is None and tr[0].world_size > 1:
        job = replace(job, num_gpus=tr[0].world_size)
    tj = job_from_options(job)
    prof = resolve_profile(profile, tj)
    c = compare_traces(tr, tj, prof, str(profile) if profile else "", stage)
    if perfetto is not None:
        _write_perfetto(perfetto, tr, tj, prof)
    if as_json:
        sys.stdout.write(json.dumps(c.to_json(top), indent=2, default=float) + "\n")
        return
    con = Console()
    ms = c.measured
    out: list = [f"{len(tr)} trace(s), {len(ms.steps)} steps measured ({', '.join(sorted({t.producer for t in tr}))}"
                 f"; device {tr[0].device_name or 'not recorded'}) vs {tj.model.name} on {tj.cluster.num_gpus:,} x "
                 f"{tj.cluster.gpu.name} · {tj.plan.short()}"
                 f" · profile {prof.name}"]
    rows = [(k, _ms(a), _ms(b), _ratio(b, a)) for k, a, b in c.breakdown()]
    rows.append(("step", _ms(ms.step_s), _ms(c.predicted.step_s), _ratio(c.predicted.step_s, ms.step_s)))
    cols = [Col("breakdown"), Col("measured\nms/step", "right"), Col("predicted\nms/step", "right"),
            Col("pred/\nmeas", "right")]
    comm, hid = ms.mean(lambda s: s.comm_s), ms.mean(lambda s: s.comm_overlapped_s)
    cap = (f"measured communication {_ms(comm)} ms/step, {_ms(hid)} ms overlapped with compute kernels "
           f"({100 * hid / comm:.0f}%), {_ms(comm - hid)} ms exposed" if comm > 0 else "no communication kernels measured")
    out.append(Fit(cols, rows, "the step"))
    out.append(cap)
    if len(tr) > 1:
        per = c.per_trace()
        out.append(Fit([Col("rank", "right"), Col("trace", flex="cut"), Col("steps", "right"),
                        Col("step ms", "right"), Col("exposed\ncomm ms", "right")],
                       [(str(r["rank"]), r["path"].replace("\\", "/").rsplit("/", 1)[-1], str(r["steps"]), _ms(r["step_s"]),
                         _ms(r["exposed_comm_s"] + r["exposed_p2p_s"])) for r in per], "per rank"))
    crow = [(k, _ms(a), _ms(b), _ratio(b, a)) for k, a, b in c.categories()]
    out.append(Fit([Col("category"), Col("measured\nms/step", "right"), Col("predicted\nms/step", "right"),
                    Col("pred/\nmeas", "right")], crow,
                   f"kernel time per category (predicted: one rank of stage {c.stage}, from {c.stage_from})"))
    nrow = [(r.op, f"{r.measured_count:g}", f"{r.predicted_count:g}", _ms(r.measured_s), _ms(r.predicted_s),
             f"{r.ratio_same_work:.2f}" if math.isfinite(r.ratio_same_work) else "-")
            for r in c.named if r.measured_s > 0 or r.predicted_s > 0]
    if nrow:
        out.append(Fit([Col("named op (twin)", flex="cut"), Col("meas\n#/step", "right"), Col("pred\n#/step", "right"),
                        Col("measured\nms/step", "right"), Col("predicted\nms/step", "right"), Col("pred/meas\nsame work", "right")],
                       nrow, "per named op: GEMMs by shape and pass, the rest by kernel name"))
    grow = [(r.group, str(r.size or "-"), f"{r.measured_count:g}", f"{r.predicted_count:g}", _ms(r.measured_s),
             _ms(r.predicted_s), _ratio(r.predicted_s, r.measured_s),
             ",".join(sorted(r.how)) or "-") for r in c.groups]
    if grow:
        out.append(Fit([Col("group"), Col("size", "right"), Col("meas\n#/step", "right"), Col("pred\n#/step", "right"),
                        Col("measured\nms/step", "right"), Col("predicted\nms/step", "right"),
                        Col("pred/\nmeas", "right"), Col("by", flex="cut")], grow,
                       "communication per process group (collectives and p2p)"))
    tot = c.matched_totals()
    if c.matches:
        mrow = [(x.what, f"{x.count:g}", _ms(x.measured_s), _ms(x.predicted_s), _ratio(x.predicted_s, x.measured_s))
                for x in c.misses(top)]
        capm = "; ".join(f"{k}: measured {_ms(a)} ms, predicted {_ms(b)} ms ({_ratio(b, a)}x)" for k, (a, b) in tot.items())
        out.append(Fit([Col("largest misses, same shape priced by the twin", flex="cut"), Col("per\nstep", "right"),
                        Col("measured\nms", "right"), Col("predicted\nms", "right"), Col("pred/\nmeas", "right")],
                       mrow, None))
        out.append(capm)
    frow = [(f"{k[1]}", k[0], _ms(s)) for k, s in sorted(ms.families().items(), key=lambda kv: -kv[1])[:top]]
    out.append(Fit([Col("measured kernels", flex="cut"), Col("category"), Col("ms/step", "right")], frow))
    prow = [(o, k, _ms(s)) for (k, o), s in sorted(c.predicted.ops.items(), key=lambda kv: -kv[1])[:top]]
    out.append(Fit([Col("predicted ops", flex="cut"), Col("category"), Col("ms/step", "right")], prow))
    for n in c.notes:
        out.append(f"note: {n}")
    print_all(con, out)


def _check_inputs(traces: List[Path], top: int) -> None:
    from ..errors import DataError, SpecError
    if top < 1:
        raise SpecError("top", f"{top} rows", "give --top 1 or more (default 10)")
    for t in traces:
        if t.is_dir():
            raise DataError("trace", f"{str(t)!r} is a directory", "give the trace files in it, e.g. DIR/*.json.gz")


def _write_perfetto(path: Path, traces, job, profile) -> None:
    """The measured steps (processes 1..n) and the replayed prediction (its processes after them)."""
    from ..errors import DataError
    from ..export.perfetto import perfetto_trace
    from ..sim.replay import simulate
    from .compare import measured_timeline
    events = measured_timeline(traces)
    doc = perfetto_trace(simulate(job, profile=profile))
    shift = len(traces) + 1
    for e in doc["traceEvents"]:
        if "pid" in e:
            e["pid"] = e["pid"] + shift
        if e.get("name") == "process_name" and e.get("ph") == "M":
            e["args"] = {"name": "predicted: " + str(e["args"].get("name", ""))}
    doc["traceEvents"] = events + doc["traceEvents"]
    try:
        path.write_text(json.dumps(doc), encoding="utf-8")
    except OSError as e:
        raise DataError("perfetto", f"cannot write {str(path)!r} ({e.strerror or e})", "choose a writable path") from None


def register(app: typer.Typer) -> None:
    app.command("compare-trace")(compare_trace)
