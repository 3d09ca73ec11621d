"""``clustertwin calibrate`` and ``clustertwin measure``: GPU commands (extra ``[gpu]``).

Without PyTorch or a CUDA GPU both say so in one line and exit 2.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def _catalog_gpu(gpu: Optional[str], device_name: str) -> str:
    from ..catalog import load_gpu
    from ..errors import SpecError
    from .measure import guess_gpu
    name = gpu or guess_gpu(device_name)
    if name is None:
        raise SpecError("gpu", f"cannot tell which catalog GPU {device_name!r} is", "give --gpu NAME")
    return load_gpu(name).name


def calibrate(out: Optional[Path] = typer.Option(None, "--out", "-o",
                                                 help="profile file to write [default: profile-<gpu>.yaml]"),
              quick: bool = typer.Option(False, "--quick", help="a coarse grid that finishes in a few minutes"),
              gpu: Optional[str] = typer.Option(None, "--gpu", help="catalog GPU name [default: from the device name]"),
              raw: Optional[Path] = typer.Option(None, "--raw", help="also save the raw timings (JSON)"),
              quiet: bool = typer.Option(False, "--quiet", help="no progress bar")) -> None:
    """Measure this GPU (GEMM, attention, memory-bound kernels, AdamW, launch, NCCL under torchrun) and write
    a versioned hardware profile for `predict --profile`."""
    from .microbench import require_cuda, run_all
    torch = require_cuda("calibrate")  # before anything else: the one-line error on a machine without a GPU
    name = _catalog_gpu(gpu, torch.cuda.get_device_name())
    data = run_all(quick=quick, quiet=quiet)
    import os
    if int(os.environ.get("RANK", "0")) != 0:
        return
    from ..catalog import load_gpu
    from .fit import fit_profile
    from .profile import save_profile
    spec = load_gpu(name)
    prof = fit_profile(data, spec, source=f"clustertwin calibrate{' --quick' if quick else ''} on "
                                          f"{data['meta'].get('device_name', name)}")
    path = save_profile(prof, out or Path(f"profile-{spec.name}.yaml"))
    if raw is not None:
        raw.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    typer.echo(f"wrote {path} ({', '.join(prof.measured)} measured)")


def measure(model: str = typer.Option(..., "--model", "-m", help="catalog name or a YAML/JSON/HF config.json file"),
            micro_batch: int = typer.Option(..., "--micro-batch", help="sequences per step"),
            seq_len: int = typer.Option(..., "--seq-len", help="tokens per sequence"),
            framework: str = typer.Option("pytorch-eager", "--framework", help="pytorch-eager | pytorch-compile"),
            recompute: str = typer.Option("none", "--recompute", help="none | full"),
            layers: Optional[int] = typer.Option(None, "--layers", help="keep only the first N layers (to fit one GPU)"),
            steps: int = typer.Option(10, "--steps", help="timed steps (after 3 warm-up steps)"),
            gpu: Optional[str] = typer.Option(None, "--gpu", help="catalog GPU name [default: from the device name]"),
            append: Optional[Path] = typer.Option(None, "--append", help="append the rows to this validation CSV"),
            quiet: bool = typer.Option(False, "--quiet", help="no per-step output")) -> None:
    """Train a model built from its spec on this GPU; record median step time and peak memory as
    validation-schema rows."""
    from .microbench import require_cuda
    torch = require_cuda("measure")
    from ..catalog import load_model
    from .measure import SCHEMA_COLUMNS, append_rows, rows_for, run_measure, truncate
    spec = truncate(load_model(model), layers)
    name = _catalog_gpu(gpu, torch.cuda.get_device_name())
    m = run_measure(spec, name, micro_batch, seq_len, framework, recompute, steps=steps, quiet=quiet)
    rows = rows_for(m)
    if append is not None:
        append_rows(append, rows)
    typer.echo(f"{spec.name} on {name}: step {m.step_time_s * 1e3:.1f} ms (median of {steps}), "
               f"peak memory {m.peak_memory_bytes / 2**30:.2f} GiB" + (f"; appended to {append}" if append else ""))
    if append is None:
        import csv
        import sys
        w = csv.DictWriter(sys.stdout, fieldnames=list(SCHEMA_COLUMNS))
        w.writeheader()
        w.writerows(rows)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
    app.command("measure")(measure)
