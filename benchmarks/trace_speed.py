"""How long writing Chakra traces for 32,768 ranks takes (the whole `trace --format chakra` call:
templates, files, groups, ASTRA-sim configs), what it writes, and how long the replay of the same
iteration takes. Prints figures; asserts nothing.

    python benchmarks/trace_speed.py                 # both configurations, in a temporary directory
    python benchmarks/trace_speed.py --config gpt3-175b --layout files --dir /scratch/et --keep

Ranks of one pipeline stage share their priced computation: each stage's trace is built and
serialized once. The default (``auto``) layout at 32K ranks is ``compact``: one template per stage,
from which ``trace-expand`` writes any rank's file (a rank's file is its stage's template with its
group ids and pipeline peers written in place); the benchmark expands one TP group's ranks to show
that cost. ``--layout files`` writes every rank's file (bound by the disk).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from clustertwin.export.chakra import build_templates, expand, write_chakra
from clustertwin.predict import make_training_job, predict_job
from clustertwin.sim.replay import simulate
from clustertwin.workload.graph import build_graph

CONFIGS = {
    # GPT-3 175B as Megatron runs it at scale, on 32,768 H100s: 12 layers per stage, 8 micro-batches
    "gpt3-175b": dict(model="gpt3-175b", gpu="h100", num_gpus=32768, plan="tp=8,pp=8,dp=512,sp=1", micro_batch=1,
                      global_batch=4096, seq_len=2048, framework="megatron"),
    # Llama 3.1 405B with Meta's 16K-GPU layout (tp8, pp16) doubled in data parallelism: 32,768 H100s
    "llama3.1-405b": dict(model="llama3.1-405b", gpu="h100", num_gpus=32768, plan="tp=8,pp=16,dp=256,sp=1",
                          micro_batch=1, global_batch=4096, seq_len=8192, framework="megatron"),
}


def run(name: str, directory: Path, keep: bool, layout: str = "auto") -> None:
    cfg = dict(CONFIGS[name])
    model = cfg.pop("model")
    job = make_training_job(model, **cfg)
    t0 = time.perf_counter()
    graph = build_graph(job)
    templates = build_templates(graph)
    t_templates = time.perf_counter() - t0
    nodes = [len(t.nodes) for t in templates]
    out = directory / name
    t0 = time.perf_counter()
    res = write_chakra(graph, out, name, layout=layout)
    t_write = time.perf_counter() - t0
    on_disk = sum(f.stat().st_size for f in out.iterdir())
    print(f"{name}: {job.cluster.num_gpus:,} ranks, {job.plan.short()}, {graph.num_microbatches} micro-batches")
    print(f"  templates (one per stage, {len(templates)} stages): {t_templates:.2f} s; "
          f"{min(nodes):,}-{max(nodes):,} nodes per rank")
    print(f"  trace ({res.layout} layout, graph given): {t_write:.2f} s, {res.files:,} trace files, "
          f"{on_disk / 1e6:,.1f} MB on disk in all (groups file and ASTRA-sim configs included)")
    if res.layout == "compact":
        tp = job.plan.tp
        t0 = time.perf_counter()
        _, files, nbytes = expand(out, name, list(range(tp)), out / "ranks")
        t_exp = time.perf_counter() - t0
        print(f"  trace-expand ranks 0-{tp - 1}: {t_exp:.2f} s, {nbytes / files / 1e3:,.0f} kB per rank file "
              f"(all {res.ranks:,} ranks would be {nbytes / files * res.ranks / 1e9:.1f} GB)")
    t0 = time.perf_counter()
    sim = simulate(job)
    t_sim = time.perf_counter() - t0
    pred = predict_job(job)
    print(f"  sim: {t_sim:.2f} s for {len(sim.ranks)} simulated ranks ({sim.tasks_simulated:,} tasks); "
          f"step {sim.step_time_s:.3f} s vs predict {pred.step_time_s:.3f} s "
          f"({100 * (sim.step_time_s / pred.step_time_s - 1):+.1f}%)")
    if not keep:
        t0 = time.perf_counter()
        shutil.rmtree(out)
        print(f"  (removed the traces in {time.perf_counter() - t0:.1f} s)")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=[*CONFIGS, "all"], default="all")
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the traces")
    ap.add_argument("--layout", choices=["auto", "files", "compact"], default="auto")
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}, python {sys.version.split()[0]}")
    names = list(CONFIGS) if args.config == "all" else [args.config]
    if args.dir is None:
        with tempfile.TemporaryDirectory(prefix="clustertwin-et-") as d:
            for n in names:
                run(n, Path(d), args.keep, args.layout)
    else:
        for n in names:
            run(n, args.dir, args.keep, args.layout)


if __name__ == "__main__":
    main()
