"""Expected error of a prediction, from the cross-validated residuals of measured runs like it.

``error_bands.yaml`` (next to this module) holds, per (framework, GPU generation, scale bucket), the
leave-one-source-out step-time errors of the project's measured runs: ``(predicted − measured) /
measured`` of the step time, each run predicted by a profile calibrated without its source. It is
generated, never edited: ``python benchmarks/cv_table.py --write`` (docs/validation.md, "Out of sample").

A prediction's band is the 10th-90th percentile of its class's errors (the smallest and largest with
fewer than 10 runs); a class with fewer than ``MIN_RUNS`` runs gives no band: "no comparable measured
runs", never a guess.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..cost.profile import architecture_of
from ..specs.framework import get_framework

BANDS_PATH = Path(__file__).resolve().parent / "error_bands.yaml"
MIN_RUNS = 3
PERCENTILES = (10, 90)


def scale_bucket(num_gpus: int) -> str:
    """The scale class of a job for error bands: one node, up to 256 GPUs, up to 2,048, beyond."""
    if num_gpus <= 8:
        return "<=8"
    if num_gpus <= 256:
        return "9-256"
    if num_gpus <= 2048:
        return "257-2048"
    return ">2048"


def run_class(framework: str, gpu, num_gpus: int) -> tuple[str, str, str]:
    """(framework, GPU generation, scale bucket) of a run."""
    return get_framework(framework).name, architecture_of(gpu), scale_bucket(num_gpus)


def band_of(errors: list[float]) -> list[float] | None:
    if len(errors) < MIN_RUNS:
        return None
    e = np.asarray(errors, dtype=float)
    if len(e) >= 10:
        lo, hi = np.percentile(e, PERCENTILES)
    else:
        lo, hi = e.min(), e.max()
    return [round(float(lo), 4), round(float(hi), 4)]


def build_table(samples: Iterable[tuple[tuple[str, str, str], float]], source: str) -> dict[str, Any]:
    """The file's content from (class, step-time error) samples."""
    by: dict[tuple[str, str, str], list[float]] = {}
    for key, err in samples:
        by.setdefault(key, []).append(float(err))
    classes = []
    for (fw, arch, scale), errs in sorted(by.items()):
        classes.append({"framework": fw, "gpu_generation": arch, "scale": scale, "n_runs": len(errs),
                        "band": band_of(errs), "median": round(float(np.median(errs)), 4)})
    return {"schema": 1, "generated_by": "python benchmarks/cv_table.py --write", "source": source,
            "error": "(predicted - measured) / measured step time, leave-one-source-out",
            "percentiles": list(PERCENTILES), "min_runs": MIN_RUNS, "classes": classes}


@lru_cache(maxsize=1)
def _table() -> dict[tuple[str, str, str], dict[str, Any]]:
    if not BANDS_PATH.is_file():
        return {}
    from ..catalog import load_yaml
    data = load_yaml(BANDS_PATH.read_text(encoding="utf-8")) or {}
    return {(c["framework"], c["gpu_generation"], c["scale"]): c for c in data.get("classes") or []}


def expected_error(framework: str, gpu, num_gpus: int) -> dict[str, Any]:
    """``{"band": [lo, hi] | None, "basis": str, "n_runs": int}`` for a job of this class."""
    fw, arch, scale = run_class(framework, gpu, num_gpus)
    what = f"{fw} on {arch} GPUs, {scale} GPUs"
    c = _table().get((fw, arch, scale))
    if c is None or c.get("band") is None:
        n = int(c["n_runs"]) if c else 0
        return {"band": None, "n_runs": n,
                "basis": f"no comparable measured runs ({what}: {n} runs, fewer than {MIN_RUNS})"}
    lo, hi = c["band"]
    how = f"{PERCENTILES[0]}th-{PERCENTILES[1]}th percentile" if c["n_runs"] >= 10 else "smallest to largest"
    return {"band": [float(lo), float(hi)], "n_runs": int(c["n_runs"]),
            "basis": f"leave-one-source-out step-time errors of {c['n_runs']} measured runs like this one "
                     f"({what}), {how}"}


def describe(e: dict[str, Any]) -> str:
    """One line for the prediction table."""
    if e["band"] is None:
        return e["basis"]
    lo, hi = e["band"]
    return f"{lo * 100:+.0f}% to {hi * 100:+.0f}% ({e['basis']})"
