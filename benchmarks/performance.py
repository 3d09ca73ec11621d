"""The speed figures users feel, each beside the previous release's figure and the ratio.

    python benchmarks/performance.py                  # print the table (takes ~2 minutes)
    python benchmarks/performance.py --write docs/performance.md
    python benchmarks/performance.py --skip moe_search,trace_32k   # leave out the slow ones

Figures of the previous release (0.1.0) are those issue 22 measured on the project's 2-core machine
(quiet, one run each): ``PREVIOUS`` below. Each figure here is the median of a few runs on the machine
this runs on (printed with the table); compare ratios only between runs on the same machine, quiet.
Nothing is asserted: speed is measured here, never in tests.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

# name: (what, unit, previous release's figure, goal); lower is better for every figure
PREVIOUS: dict[str, tuple[str, str, float, float]] = {
    "predict_names": ("clustertwin.predict(\"gpt3-175b\", gpu=..., plan=...) by names, per call after the first",
                      "ms", 5.3, 0.3),
    "predict_job": ("predict_job(job) with a prebuilt job, per call", "ms", 0.71, 0.71),
    "cli_predict": ("`clustertwin predict` (the default job), start to exit", "ms", 325.0, 200.0),
    "moe_search": ("`search` DeepSeek-V3 on 2,048 H800s, exhaustive", "s", 63.0, 5.0),
    "dense_search": ("`search` GPT-3 175B on 1,024 A100s, exhaustive", "s", 2.8, 2.8),
    "trace_32k_time": ("`trace` GPT-3 175B on 32,768 ranks (Chakra), time", "s", 11.8, 5.0),
    "trace_32k_bytes": ("`trace` GPT-3 175B on 32,768 ranks (Chakra), bytes on disk", "GB", 7.7, 1.0),
}
GPT3 = dict(gpu="a100-80gb", num_gpus=1024, plan="tp=8,pp=16,dp=8,sp=1,recompute=selective", micro_batch=1,
            global_batch=1536, seq_len=2048)


def _median(f: Callable[[], float], runs: int) -> float:
    return statistics.median(f() for _ in range(runs))


def predict_names() -> float:
    import clustertwin
    clustertwin.predict("gpt3-175b", **GPT3)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        clustertwin.predict("gpt3-175b", **GPT3)
    return (time.perf_counter() - t0) / n * 1e3


def predict_job() -> float:
    from clustertwin import make_training_job, predict_job as pj
    job = make_training_job("gpt3-175b", **GPT3)
    pj(job)
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        pj(job)
    return (time.perf_counter() - t0) / n * 1e3


def cli_predict() -> float:
    # pip compiles the package's bytecode when it installs it; an editable checkout (or a shell with
    # PYTHONDONTWRITEBYTECODE set) may have none, and would time the compiler instead of the start-up
    import compileall

    import clustertwin
    compileall.compile_dir(str(Path(clustertwin.__file__).parent), quiet=1)
    exe = shutil.which("clustertwin") or sys.executable
    cmd = [exe, "predict"] if exe != sys.executable else [exe, "-m", "clustertwin", "predict"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return (time.perf_counter() - t0) * 1e3


def _search(model: str, **kw) -> float:
    from clustertwin.search import search
    t0 = time.perf_counter()
    search(model, top=10, pareto_points=1, **kw)
    return time.perf_counter() - t0


def moe_search() -> float:
    return _search("deepseek-v3", cluster="deepseek-v3-h800", global_batch=512, seq_len=4096)   # the CLI's defaults


def dense_search() -> float:
    return _search("gpt3-175b", gpu="a100-80gb", num_gpus=1024, global_batch=1536, seq_len=2048)


def _trace() -> tuple[float, float]:
    exe = shutil.which("clustertwin")
    with tempfile.TemporaryDirectory() as d:
        cmd = [exe or sys.executable, *([] if exe else ["-m", "clustertwin"]), "trace", "--model", "gpt3-175b",
               "--gpu", "h100", "--num-gpus", "32768", "--plan", "tp=8,pp=8,dp=512,sp=1", "--micro-batch", "1",
               "--global-batch", "4096", "--seq-len", "2048", "--format", "chakra", "--out", d]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        elapsed = time.perf_counter() - t0
        seen: set[tuple[int, int]] = set()
        size = 0
        for p in Path(d).rglob("*"):
            if p.is_file():
                st = p.stat()
                if (st.st_dev, st.st_ino) not in seen:   # a hard-linked file's bytes count once
                    seen.add((st.st_dev, st.st_ino))
                    size += st.st_blocks * 512
        return elapsed, size / 1e9


_TRACE: list[tuple[float, float]] = []


def trace_32k_time() -> float:
    _TRACE.append(_trace())
    return _TRACE[-1][0]


def trace_32k_bytes() -> float:
    return _TRACE[-1][1] if _TRACE else _trace()[1]


FIGURES: dict[str, tuple[Callable[[], float], int]] = {
    "predict_names": (predict_names, 3), "predict_job": (predict_job, 3), "cli_predict": (cli_predict, 5),
    "dense_search": (dense_search, 1), "moe_search": (moe_search, 1), "trace_32k_time": (trace_32k_time, 1),
    "trace_32k_bytes": (trace_32k_bytes, 1),
}


def table(skip: set[str]) -> str:
    lines = [f"Machine: {os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}. "
             "Ratio: this release's figure over the previous release's (below 1 is faster).", "",
             "| figure | previous release | now | ratio | goal | meets goal |", "|---|---:|---:|---:|---:|---|"]
    for name, (what, unit, prev, goal) in PREVIOUS.items():
        if name in skip:
            lines.append(f"| {what} | {prev:g} {unit} | not measured | | {goal:g} {unit} | |")
            continue
        f, runs = FIGURES[name]
        now = _median(f, runs)
        lines.append(f"| {what} | {prev:g} {unit} | {now:.3g} {unit} | {now / prev:.2f} | {goal:g} {unit} | "
                     f"{'yes' if now <= goal else 'no'} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", type=Path, help="replace the generated table in this markdown file")
    ap.add_argument("--skip", default="", help="comma-separated figures to leave out: " + ", ".join(PREVIOUS))
    a = ap.parse_args()
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    unknown = skip - set(PREVIOUS)
    if unknown:
        sys.exit(f"error: --skip: unknown figure {sorted(unknown)[0]!r}; use one of {', '.join(PREVIOUS)}")
    out = table(skip)
    if a.write is None:
        print(out)
        return
    if not a.write.is_file():
        sys.exit(f"error: --write: {a.write} not found; give docs/performance.md")
    text = a.write.read_text(encoding="utf-8")
    begin, end = "<!-- BEGIN generated performance -->", "<!-- END generated performance -->"
    if begin not in text or end not in text:
        sys.exit(f"error: --write: {a.write} has no {begin} ... {end} block; add one where the table goes")
    new = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: f"{begin}\n{out}\n{end}", text, flags=re.S)
    a.write.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
