"""The options every job-describing command shares (predict, search, goodput, trace, sim, report):
one definition, so that a flag means the same everywhere.

``@job_options()`` puts them on a command: typer sees the shared flags followed by the command's
own, and the command receives them as one ``job: JobOptions`` (clustertwin.jobs), which
``job_from_options`` or ``search_inputs`` turns into the job; with ``profile=True`` it also
receives ``profile``, the ``--profile`` file (or None).
"""
from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from .jobs import DEFAULT_FRAMEWORK, JobOptions

PLAN_HELP = 'e.g. "tp=8,pp=8,vpp=1,dp=16,cp=1,ep=1,sp=1,zero=1,recompute=selective"'

ModelOpt = typer.Option(None, "--model", "-m", help="catalog name or a YAML/JSON/HF config.json file [default: llama3-8b]")
GpuOpt = typer.Option(None, "--gpu", help="GPU preset, e.g. h100, a100-80gb [default: h100-sxm]")
NumGpusOpt = typer.Option(None, "--num-gpus", "-n", help="GPUs in the job [default: 64, or the cluster's size]")
GpnOpt = typer.Option(None, "--gpus-per-node", help="GPUs per node (default: the GPU's standard server)")
ClusterOpt = typer.Option(None, "--cluster", help="cluster preset or YAML/JSON file (instead of --gpu)")
PlanOpt = typer.Option(None, "--plan", "-p", help=PLAN_HELP)
MicroBatchOpt = typer.Option(None, "--micro-batch", help="sequences per micro-batch")
GlobalBatchOpt = typer.Option(None, "--global-batch", help="sequences per iteration [default: 2,097,152 tokens per "
                              "step: 256 at seq 8192, 1024 at 2048; in predict rounded to a multiple of dp x "
                              "micro-batch, the same for every plan]")
SeqLenOpt = typer.Option(None, "--seq-len", help="tokens per sequence [default: the model's, at most 8192]")
PrecisionOpt = typer.Option(None, "--precision", help="bf16 | fp16 | fp8 | fp32 [default: bf16]")
FrameworkOpt = typer.Option(DEFAULT_FRAMEWORK, "--framework",
                            help="megatron | nemo | torchtitan | deepspeed | pytorch-eager | pytorch-compile, a "
                                 "release (megatron-lm@2021, megatron-deepspeed, nemo@24.07, torchtitan-compile, "
                                 "hai-llm, meta-llama3, ...) "
                                 "or family@version (megatron@2022)")
ProfileOpt = typer.Option(None, "--profile", help="measured hardware profile (clustertwin calibrate)")
NoStragglersOpt = typer.Option(False, "--no-stragglers",
                               help="every GPU at the mean speed: no wait for the slowest GPU in the step (a "
                                    "measured step time already has it)")
StragglerCvOpt = typer.Option(None, "--straggler-cv", help="per-GPU speed variation, std/mean [default: the "
                              "cluster's, 0.01]")
ThermalSlowdownOpt = typer.Option(None, "--thermal-slowdown", help="the hottest GPU of a node this much slower "
                                  "[default: the cluster's, 0.015]")

# name, type, option: the order of --help
_JOB_PARAMS: tuple[tuple[str, Any, Any], ...] = (
    ("model", Optional[str], ModelOpt), ("gpu", Optional[str], GpuOpt), ("num_gpus", Optional[int], NumGpusOpt),
    ("gpus_per_node", Optional[int], GpnOpt), ("cluster", Optional[str], ClusterOpt), ("plan", Optional[str], PlanOpt),
    ("micro_batch", Optional[int], MicroBatchOpt), ("global_batch", Optional[int], GlobalBatchOpt),
    ("seq_len", Optional[int], SeqLenOpt), ("precision", Optional[str], PrecisionOpt),
    ("framework", str, FrameworkOpt),
    ("no_stragglers", bool, NoStragglersOpt), ("straggler_cv", Optional[float], StragglerCvOpt),
    ("thermal_slowdown", Optional[float], ThermalSlowdownOpt),
)
# flags that set one JobOptions field together: the fleet's per-GPU speed variation
_STRAGGLER_FLAGS = ("no_stragglers", "straggler_cv", "thermal_slowdown")


def stragglers_of(no_stragglers: bool = False, straggler_cv: float | None = None,
                  thermal_slowdown: float | None = None) -> Any:
    """JobOptions.stragglers from the flags: None (the cluster's), False (off) or the fields given.
    A value out of range, or values beside --no-stragglers, is one line (exit 2)."""
    from .errors import SpecError
    given = {k: v for k, v in (("gpu_speed_cv", straggler_cv), ("thermal_slowdown", thermal_slowdown))
             if v is not None}
    for name, v in (("straggler_cv", straggler_cv), ("thermal_slowdown", thermal_slowdown)):
        if v is not None and not (0.0 <= v <= 0.5):
            raise SpecError(name, f"{v} is out of range", "give a fraction from 0 to 0.5, e.g. 0.01")
    if no_stragglers:
        if given:
            raise SpecError("no_stragglers", "given with --straggler-cv or --thermal-slowdown",
                            "drop --no-stragglers, or the straggler values it turns off")
        return False
    return given or None


def job_options(*, profile: bool = False, plan_help: str | None = None,
                repeat: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Decorate a command taking ``job: JobOptions`` (and ``profile`` if ``profile``) with the shared
    flags. ``plan_help`` rewords --plan's help where the command reads it its own way (search: the
    fields held fixed; report: the plan to report); the flag and its syntax stay the same.
    ``repeat``: shared options (of plan, cluster, gpu) that may be given several times (compare); the
    command receives their values as ``repeated: dict[str, list[str]]`` and None in ``job``."""
    def decorate(fn: Callable) -> Callable:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values()
               if p.name not in ("job", "profile", "repeated")]
        shared = []
        for name, kind, opt in _JOB_PARAMS:
            if name == "plan" and plan_help is not None:
                opt = typer.Option(None, "--plan", "-p", help=plan_help)
            if name in repeat:
                opt = typer.Option(None, *opt.param_decls, help=f"{opt.help}; repeat it to compare several")
                kind = Optional[List[str]]
            shared.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=kind))
        if profile:
            shared.append(inspect.Parameter("profile", inspect.Parameter.KEYWORD_ONLY, default=ProfileOpt,
                                            annotation=Optional[Path]))
        names = [p.name for p in shared]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            values = {n: kwargs.pop(n) for n in names}
            prof = values.pop("profile", None)
            if repeat:
                kwargs["repeated"] = {n: list(values.pop(n) or []) for n in repeat}
            values["stragglers"] = stragglers_of(*(values.pop(n) for n in _STRAGGLER_FLAGS))
            kwargs["job"] = JobOptions(**values)
            if profile:
                kwargs["profile"] = prof
            return fn(**kwargs)

        params = shared + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command
    return decorate
