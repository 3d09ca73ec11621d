"""How long writing Chakra traces for 32,768 ranks takes, and how long the replay of the same
iteration takes. Prints figures; asserts nothing.

    python benchmarks/trace_speed.py                 # both configurations, in a temporary directory
    python benchmarks/trace_speed.py --config gpt3-175b --dir /scratch/et --keep

Ranks of one pipeline stage share their priced computation: each stage's trace is built and
serialized once, and a rank's file is that template with its group ids and pipeline peers written
in place, so the time is dominated by writing the bytes (check the disk: the figures below include
the page cache filling up and draining to the device).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from clustertwin.export.chakra import build_templates, write_chakra
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


def run(name: str, directory: Path, keep: bool) -> None:
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
    res = write_chakra(graph, out, name)
    t_write = time.perf_counter() - t0
    print(f"{name}: {job.cluster.num_gpus:,} ranks, {job.plan.short()}, {graph.num_microbatches} micro-batches")
    print(f"  templates (one per stage, {len(templates)} stages): {t_templates:.2f} s; "
          f"{min(nodes):,}-{max(nodes):,} nodes per rank")
    print(f"  write all ranks: {t_write:.1f} s for {res.files:,} files, {res.bytes_written / 1e9:.2f} GB "
          f"({res.bytes_written / res.files / 1e3:,.0f} kB per rank, {res.bytes_written / 1e6 / t_write:,.0f} MB/s)")
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
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}, python {sys.version.split()[0]}")
    names = list(CONFIGS) if args.config == "all" else [args.config]
    if args.dir is None:
        with tempfile.TemporaryDirectory(prefix="clustertwin-et-") as d:
            for n in names:
                run(n, Path(d), args.keep)
    else:
        for n in names:
            run(n, args.dir, args.keep)


if __name__ == "__main__":
    main()
