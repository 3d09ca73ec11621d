"""The job a command describes: one set of options (model, cluster, plan, batch, sequence length,
precision, framework), one set of defaults, and one way to turn them into a TrainingJob or into the
inputs of a plan search. Every command (predict, search, goodput, trace, sim, report) goes through
here, so each accepts and rejects the same inputs the same way.

With none of model, plan, cluster, GPU or GPU count given, the options are the built-in default job:
Llama 3 8B on 64 H100s, plan "tp=2,pp=1,dp=32,zero=1,recompute=none", micro-batch 1, global batch
256, sequence length 8192 (the README's main example).

A job that gives no global batch trains ``DEFAULT_TOKENS_PER_STEP`` = 2,097,152 tokens per step
(``default_global_batch``): 256 sequences of 8,192 (the default job's), 1,024 of 2,048, rounded to a
multiple of what the plan divides (dp x micro-batch) — the same batch for every plan of a job.

>>> job = job_from_options(JobOptions())
>>> job.model.name, job.cluster.num_gpus, (job.plan.tp, job.plan.dp), job.plan.micro_batch, job.plan.global_batch, job.seq_len
('llama3-8b', 64, (2, 32), 1, 256, 8192)
>>> s = search_inputs(JobOptions(model="gpt3-1.3b", gpu="a100-80gb", num_gpus=16, plan="tp=2", micro_batch=1))
>>> s.model.name, s.cluster.num_gpus, s.global_batch, s.seq_len, s.precision, sorted(s.fixed.items())
('gpt3-1.3b', 16, 1024, 2048, 'bf16', [('micro_batch', 1), ('tp', 2)])
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .errors import PlanError, SpecError

if TYPE_CHECKING:
    from .specs import ClusterSpec, ModelSpec, Plan, TrainingJob
    from .specs.job import DEFAULT_TOKENS_PER_STEP, default_global_batch

# The catalog and the specs (pydantic, numpy) are imported where a job is built, not here: the command
# line imports this module to declare its options, before it knows which command runs.

DEFAULT_MODEL = "llama3-8b"
DEFAULT_GPU = "h100-sxm"
DEFAULT_NUM_GPUS = 64
DEFAULT_PLAN = "tp=2,pp=1,dp=32,zero=1,recompute=none"
DEFAULT_SEQ_LEN = 8192
DEFAULT_MICRO_BATCH = 1
DEFAULT_GLOBAL_BATCH = 256      # the default job's: DEFAULT_TOKENS_PER_STEP / DEFAULT_SEQ_LEN
DEFAULT_PRECISION = "bf16"
DEFAULT_FRAMEWORK = "megatron"


@dataclass(frozen=True)
class JobOptions:
    """What a command line says about the job; None is "not given" (a default applies)."""

    model: str | Path | ModelSpec | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    cluster: str | Path | ClusterSpec | None = None
    gpus_per_node: int | None = None
    plan: str | Plan | None = None
    micro_batch: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    precision: str | None = None
    framework: str = DEFAULT_FRAMEWORK
    # the fleet's per-GPU speed variation (``with_stragglers``): None the cluster's, False off, or
    # {field: value} over the cluster's (--straggler-cv, --thermal-slowdown)
    stragglers: Any = None

    @property
    def is_default_job(self) -> bool:
        """True when nothing names a job (model, plan, cluster, GPU, GPU count): the built-in one."""
        return all(v is None for v in (self.model, self.plan, self.cluster, self.gpu, self.num_gpus))

    def with_defaults(self) -> "JobOptions":
        """The options with the default job's model, and for the default job its plan, micro-batch
        and sequence length, filled in where not given. The global batch stays unset unless given: the
        job's default (DEFAULT_TOKENS_PER_STEP tokens) gives the default job its 256 sequences."""
        if not self.is_default_job:
            return replace(self, model=DEFAULT_MODEL) if self.model is None else self
        return replace(self, model=DEFAULT_MODEL, plan=DEFAULT_PLAN,
                       micro_batch=DEFAULT_MICRO_BATCH if self.micro_batch is None else self.micro_batch,
                       seq_len=DEFAULT_SEQ_LEN if self.seq_len is None else self.seq_len)

    def as_kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of make_training_job, predict, build_report."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SearchInputs:
    """A plan search's job: everything but the plan, and the plan fields the user held fixed."""

    model: ModelSpec
    cluster: ClusterSpec
    global_batch: int
    seq_len: int
    precision: str
    framework: str
    fixed: dict[str, Any] = field(default_factory=dict)

    def fix_with(self, fix: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """These fixed fields and ``fix`` (--fix) together; a field given both ways must agree."""
        from .specs.plan import parse_fixed
        extra = parse_fixed(fix, self.precision)
        for k, v in extra.items():
            if k in self.fixed and self.fixed[k] != v:
                raise PlanError(f"fix.{k}", f"{v!r} contradicts {k}={self.fixed[k]!r} given with --plan or --micro-batch",
                                "give the field once")
        return {**extra, **{k: v for k, v in self.fixed.items() if k not in extra}}

    def search_kwargs(self, fix: str | Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Keyword arguments of clustertwin.search.search for this job (model passed first)."""
        return dict(cluster=self.cluster, global_batch=self.global_batch, seq_len=self.seq_len,
                    precision=self.precision, framework=self.framework, fix=self.fix_with(fix))


def with_stragglers(c: ClusterSpec, stragglers: Any = None) -> ClusterSpec:
    """``c`` with its fleet's per-GPU speed variation (what a synchronous step waits for) set by
    ``stragglers``: None or True keeps the cluster's (default: the sourced ``StragglerModel``), False
    turns it off (every GPU at the mean speed), a StragglerModel replaces it, and a mapping of its
    fields (gpu_speed_cv, thermal_slowdown, slow_node_fraction, slow_node_slowdown) changes those."""
    from .specs.hardware import STRAGGLERS_OFF, StragglerModel
    if stragglers is None or stragglers is True:
        return c
    if stragglers is False:
        model = STRAGGLERS_OFF
    elif isinstance(stragglers, StragglerModel):
        model = stragglers
    elif isinstance(stragglers, Mapping):
        fields_ = {}
        for k, v in stragglers.items():
            if k not in StragglerModel.model_fields:
                raise SpecError(f"stragglers.{k}", "is not a straggler parameter",
                                f"use {', '.join(StragglerModel.model_fields)}")
            if v is None:
                continue
            hi = {"slow_node_fraction": 1.0, "slow_node_slowdown": 10.0}.get(k, 0.5)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 <= v <= hi):
                raise SpecError(k, f"{v!r} is out of range", f"give a fraction from 0 to {hi:g}, e.g. 0.01")
            fields_[k] = float(v)
        model = c.stragglers.model_copy(update=fields_) if fields_ else c.stragglers
    else:
        raise SpecError("stragglers", f"cannot read {stragglers!r}",
                        "give False (off), a StragglerModel, or {field: value}")
    return c if model == c.stragglers else c.model_copy(update={"stragglers": model})


def resolve_cluster(gpu: str | None = None, num_gpus: int | None = None,
                    cluster: str | Path | ClusterSpec | None = None, gpus_per_node: int | None = None,
                    stragglers: Any = None) -> ClusterSpec:
    """A cluster from a preset/file (optionally resized to ``num_gpus``) or from a GPU and a count;
    ``stragglers``: its fleet's per-GPU speed variation (``with_stragglers``; None: the cluster's)."""
    if stragglers is not None:
        return with_stragglers(resolve_cluster(gpu, num_gpus, cluster, gpus_per_node), stragglers)
    from .catalog import cluster_for_gpu, load_cluster
    if cluster is not None:
        c = load_cluster(cluster)
        if gpu is not None:   # the cluster names its GPU: a --gpu beside it must be the same one
            from .catalog import load_gpu
            g = load_gpu(gpu)
            if g.name != c.gpu.name:
                raise SpecError("gpu", f"{g.name} conflicts with cluster {c.name}, whose GPUs are {c.gpu.name}",
                                "drop --gpu (the cluster gives its GPU), or give --gpu with --num-gpus instead of "
                                "--cluster")
        if gpus_per_node and gpus_per_node != c.gpus_per_node:
            raise SpecError("gpus_per_node", f"{gpus_per_node} conflicts with cluster {c.name} ({c.gpus_per_node} per node)",
                            "drop --gpus-per-node or describe another cluster")
        return c.with_gpus(num_gpus) if num_gpus is not None else c
    return cluster_for_gpu(gpu or DEFAULT_GPU, DEFAULT_NUM_GPUS if num_gpus is None else num_gpus, gpus_per_node)


def _plan(plan: str | Plan | None, micro_batch: int | None, global_batch: int | None, precision: str | None) -> Plan:
    from .specs import Plan, parse_plan
    from .specs.plan import plan_fields
    overrides = {"micro_batch": micro_batch, "global_batch": global_batch, "precision": precision}
    given = {k: v for k, v in overrides.items() if v is not None}
    if given and plan is not None:   # a field the plan names and a flag sets must agree, as search's --fix does
        # (the plan text's fields as written: checked as a whole only with the flags, so "fp8_params=1" with
        # --precision fp8 is one FP8 plan, not a bf16 plan refused)
        named = ({k: getattr(plan, k) for k in plan.model_fields_set} if isinstance(plan, Plan)
                 else plan_fields(plan))
        for k, v in given.items():
            if k in named and str(named[k]).strip().lower() != str(v).strip().lower():
                flag = "--" + k.replace("_", "-")
                raise PlanError(f"plan.{k}", f"{named[k]} in the plan contradicts {flag} {v}",
                                f"give it once: in the plan or as {flag}")
    if isinstance(plan, Plan):
        return plan.model_copy(update=given)
    return parse_plan(plan if plan is not None else "", **overrides)


def _framework(name: str) -> str:
    from .specs.framework import get_framework
    return get_framework(name).name


def make_training_job(model: str | Path | ModelSpec = DEFAULT_MODEL, *, gpu: str | None = None,
                      num_gpus: int | None = None, cluster: str | Path | ClusterSpec | None = None,
                      gpus_per_node: int | None = None, plan: str | Plan | None = None,
                      micro_batch: int | None = None, global_batch: int | None = None,
                      seq_len: int | None = None, precision: str | None = None,
                      framework: str = DEFAULT_FRAMEWORK, tokens: float | None = None,
                      stack_zero: bool = False, stragglers: Any = None) -> TrainingJob:
    """A checked TrainingJob from exactly what is given (no default job): the model's sequence length
    (at most 8192) unless ``seq_len``, the plan's defaults for what it leaves out, except the ZeRO
    stage: a plan that does not name one (``zero=``, ``fsdp``) takes the framework stack's default
    (``default_zero_stage``), as ``validate`` does for a row without one, so ``--framework torchtitan
    --plan "tp=2"`` runs FSDP instead of refusing a ZeRO-1 nobody asked for. With ``stack_zero`` (the
    plan is not the user's: none was given) the stack's stage replaces the default plan's."""
    from .catalog import load_model
    from .specs import make_job
    m = load_model(model)
    c = resolve_cluster(gpu, num_gpus, cluster, gpus_per_node, stragglers)
    p = _plan(plan, micro_batch, global_batch, precision)
    fw = _framework(framework)
    if stack_zero or "zero_stage" not in p.model_fields_set:
        from .specs.framework import get_framework
        from .specs.plan import make_plan
        given = {k: getattr(p, k) for k in p.model_fields_set}
        p = make_plan(**{**given, "zero_stage": get_framework(fw).default_zero_stage})
    return make_job(m, c, p, min(m.max_seq_len, DEFAULT_SEQ_LEN) if seq_len is None else seq_len, fw, tokens)


def job_from_options(options: JobOptions, tokens: float | None = None) -> TrainingJob:
    """The TrainingJob of a command line: the built-in default job when nothing names one. Without
    --plan, the plan's ZeRO stage is the framework stack's default (``default_zero_stage``: ZeRO-1 for
    Megatron-Core, ZeRO-0 for Megatron-LM 2021, FSDP for torchtitan), so --framework alone never asks a
    stack for a stage it does not have; a ZeRO stage the user writes is kept and checked."""
    return make_training_job(**options.with_defaults().as_kwargs(), tokens=tokens, stack_zero=options.plan is None)


def search_inputs(options: JobOptions) -> SearchInputs:
    """A search's job from the same options: the plan fields given (``--plan``, ``--micro-batch``) are
    held fixed and the rest searched; the global batch is DEFAULT_TOKENS_PER_STEP tokens (256 sequences
    at 8,192; ``default_global_batch``) unless given, in ``global_batch`` or in the plan. Checked as make_training_job checks, in the same order (model,
    cluster, plan, framework), so a mistake reads the same in every command."""
    from .catalog import load_model
    from .specs.job import default_global_batch
    o = replace(options, model=DEFAULT_MODEL) if options.model is None else options
    m = load_model(o.model)  # type: ignore[arg-type]
    c = resolve_cluster(o.gpu, o.num_gpus, o.cluster, o.gpus_per_node, o.stragglers)
    p = _plan(o.plan, o.micro_batch, o.global_batch, o.precision)
    fw = _framework(o.framework)
    given = {k: getattr(p, k) for k in p.model_fields_set}
    gb = given.pop("global_batch", None)
    given.pop("precision", None)
    from .specs.plan import FIXABLE
    for k in given:
        if k not in FIXABLE:
            raise PlanError(f"plan.{k}", "the search cannot hold this field fixed",
                            f"leave it out; the search holds fixed only {', '.join(FIXABLE)}")
    if options.is_default_job:
        seq = DEFAULT_SEQ_LEN if o.seq_len is None else o.seq_len
    else:
        seq = min(m.max_seq_len, DEFAULT_SEQ_LEN) if o.seq_len is None else o.seq_len
    if seq <= 0:  # as make_job says it
        raise PlanError("seq_len", f"{seq} must be positive", "give the training sequence length")
    return SearchInputs(m, c, default_global_batch(seq) if gb is None else gb, seq, p.precision, fw, given)


def default_job() -> TrainingJob:
    """The built-in default job (what every command describes when given no job options)."""
    return job_from_options(JobOptions())


def __getattr__(name: str) -> Any:
    if name in ("DEFAULT_TOKENS_PER_STEP", "default_global_batch"):   # re-exported from specs.job, on first use
        from .specs import job
        return getattr(job, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["JobOptions", "SearchInputs", "job_from_options", "search_inputs", "make_training_job", "resolve_cluster",
           "with_stragglers",
           "default_job", "DEFAULT_MODEL", "DEFAULT_GPU", "DEFAULT_NUM_GPUS", "DEFAULT_PLAN", "DEFAULT_SEQ_LEN",
           "DEFAULT_MICRO_BATCH", "DEFAULT_GLOBAL_BATCH", "DEFAULT_PRECISION", "DEFAULT_FRAMEWORK",
           "DEFAULT_TOKENS_PER_STEP", "default_global_batch"]
