"""The rules a plan must keep: one table, read by ``check_plan`` (one plan, a one-line error), by the
search's pruning (ints per loop level, counting what each rule removes) and by ``validate``.

Each rule has a stable name (the search's prune reasons use it), the stage of the search at which
its fields are known, the plan field it blames, a ``broken`` check written with operators that work
alike on Python ints and element-wise on numpy arrays of candidate plans, and a one-line message
with the fix. The order of the table is the order of the checks: the first rule a plan breaks is
the one reported, by ``check_plan`` and by the search alike. Framework capabilities
(``Capabilities``, held by each profile in ``specs/framework.py``) are rules too, after the rules
of the model and the cluster.

>>> j = JobFacts(num_layers=32, heads=32, kv_heads=8, ffn=14336, gpus_per_node=8, num_gpus=64, seq_len=8192)
>>> first_broken(j, PlanFacts(tp=3, dp=1)).name           # 3 x 1 is not 64 GPUs
'gpus'
>>> first_broken(j, PlanFacts(tp=3, dp=1), rules_at("tp")).name
'tp_heads'
>>> import numpy as np
>>> tp_rules = rules_at("tp")
>>> [tp_rules[i].name if i >= 0 else None
...  for i in first_broken_index(j, PlanFacts(tp=np.array([1, 3, 16]), overlap_tp=np.array([True, False, True])),
...                              tp_rules)]
[None, 'tp_heads', 'tp_overlap_nodes']
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from ..errors import PlanError
from .layout import stage_layer_split

# the stages of the search, in the order its loops know the fields: a rule's stage is the first at
# which everything it reads is known ("job": the job alone, whatever the plan's sizes, which the search
# checks once before it enumerates anything; "size": the GPU count, which the search's factorisation keeps)
STAGES = ("job", "size", "tp", "layout", "experts", "batch", "framework", "options")


def _not(x: Any) -> Any:
    return np.logical_not(x) if isinstance(x, np.ndarray) else not x


def _isin(x: Any, values: tuple[Any, ...]) -> Any:
    return np.isin(x, values) if isinstance(x, np.ndarray) else x in values


@dataclass(frozen=True)
class Capabilities:
    """Which plans a framework can run. Each field constrains one plan option; ``specs/framework.py``
    gives each framework's, with sources."""

    zero_stages: tuple[int, ...] = (0, 1, 2, 3)   # ZeRO stages it implements (3 = FSDP)
    sharded_grads_with_pp: bool = True    # ZeRO-2/3 together with pipeline parallelism
    ddp_with_model_parallel: bool = True  # ZeRO-0 (plain DDP) together with tp, pp or cp
    tensor_parallel: bool = True          # tp > 1: the model has tensor-parallel layers
    pipeline_parallel: bool = True        # pp > 1: a pipeline schedule
    interleaved_pp: bool = True           # an interleaved pipeline schedule (vpp > 1)
    context_parallel: bool = True         # cp > 1: ring attention over the sequence
    expert_parallel: bool = True          # ep > 1
    expert_tp_any: bool = True            # False: experts split over etp = 1 or etp = tp only
    tp_overlap: bool = True               # overlap_tp_comm: TP collectives overlapped with the GEMMs
    dualpipe: bool = False                # pp_schedule=dualpipe: DeepSeek's bidirectional schedule (HAI-LLM)
    # the interleaved schedule with any number of micro-batches (a tunable group of N contiguous
    # micro-batches per chunk; sim/schedule.py microbatch_group), not only multiples of pp
    any_interleaved_microbatches: bool = False


@dataclass(frozen=True)
class JobFacts:
    """What the rules read of the job a plan is for: the model's sizes, the cluster, the sequence
    length and the framework."""

    num_layers: int
    heads: int
    kv_heads: int
    ffn: int
    gpus_per_node: int
    num_gpus: int
    seq_len: int
    experts: int = 0            # routed experts (0: a dense model)
    expert_ffn: int = 0
    model: str = "model"
    framework: str = "megatron"
    can: Capabilities = field(default_factory=Capabilities)
    gpu: str = "the GPU"
    precisions: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")  # the GPU's dense peaks

    @classmethod
    def of(cls, model: Any, cluster: Any, seq_len: int, framework: Any = None) -> "JobFacts":
        """From a ModelSpec, a ClusterSpec and a FrameworkProfile (None: no framework limits)."""
        moe = bool(model.is_moe)
        return cls(num_layers=model.num_layers, heads=model.num_heads, kv_heads=model.kv_heads,
                   ffn=model.ffn_hidden_size, gpus_per_node=cluster.gpus_per_node, num_gpus=cluster.num_gpus,
                   seq_len=seq_len, experts=model.moe_num_experts if moe else 0,
                   expert_ffn=model.expert_ffn if moe else 0, model=model.name,
                   framework=framework.name if framework is not None else "any",
                   can=framework.capabilities if framework is not None else Capabilities(),
                   gpu=cluster.gpu.name, precisions=tuple(cluster.gpu.peak_flops))


@dataclass(frozen=True)
class PlanFacts:
    """The plan fields the rules read: ints for one plan, numpy arrays for many. ``etp`` is
    resolved (None in a Plan means tp); ``overlap_tp`` is True only where the plan holds it on."""

    tp: Any
    pp: Any = 1
    vpp: Any = 1
    cp: Any = 1
    dp: Any = 1
    ep: Any = 1
    etp: Any = None
    micro_batch: Any = 1
    global_batch: Any = None
    zero_stage: Any = 1
    overlap_tp: Any = False
    sp: Any = False            # sequence parallelism (meaningful with tp > 1)
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    precision: Any = None      # None: not known (the search checks it once, for the whole job)
    dualpipe: Any = False      # the plan asks for DualPipe outright (pp_schedule=dualpipe)
    overlap_ep: Any = False    # the plan asks for the MoE all-to-all overlap outright (overlap_ep_comm=1)

    @property
    def expert_tp(self) -> Any:
        return self.tp if self.etp is None else self.etp

    @classmethod
    def of(cls, plan: Any) -> "PlanFacts":
        """From a Plan whose dp is resolved."""
        return cls(tp=plan.tp, pp=plan.pp, vpp=plan.vpp, cp=plan.cp, dp=plan.dp, ep=plan.ep, etp=plan.etp,
                   micro_batch=plan.micro_batch, global_batch=plan.global_batch, zero_stage=plan.zero_stage,
                   overlap_tp=plan.overlap_tp_comm is True, sp=bool(plan.sp),
                   first_stage_layers=plan.first_stage_layers,
                   last_stage_layers=plan.last_stage_layers, precision=plan.precision,
                   dualpipe=getattr(plan, "pp_schedule", None) == "dualpipe",
                   overlap_ep=getattr(plan, "overlap_ep_comm", None) is True)


def tp_overlap_possible(tp: Any, gpus_per_node: int, sp: Any = True) -> Any:
    """Whether TP communication can overlap the GEMMs (ints or arrays): only with the TP group
    inside one NVLink domain, since Transformer Engine's userbuffers work over NVLink only
    (NVIDIA/TransformerEngine#1071), and only with sequence parallelism (``sp``): the overlap splits
    the all-gather before and the reduce-scatter after each GEMM into chunks, and without SP there
    is an all-reduce instead (rule ``tp_overlap_sp``)."""
    return (tp <= gpus_per_node) & sp


def tp_overlap_without_sp(p: PlanFacts) -> Any:
    """Plans (ints or arrays) holding TP communication overlap on with tp > 1 and no sequence
    parallelism, which Megatron-LM refuses (rule ``tp_overlap_sp``)."""
    return p.overlap_tp & (p.tp > 1) & _not(p.sp)


class RuleBroken(PlanError):
    """A plan that breaks a rule of the table; ``rule`` is the rule's name (a prune reason)."""

    def __init__(self, rule: str, field: str, problem: str, fix: str = "") -> None:
        self.rule = rule
        super().__init__(field, problem, fix)


Check = Callable[[JobFacts, PlanFacts], Any]
Explain = Callable[[JobFacts, PlanFacts], tuple[str, str, str]]


@dataclass(frozen=True)
class Rule:
    name: str           # stable key: the search's prune reason
    stage: str          # the search stage at which its fields are known (STAGES)
    describe: str       # what it rules out, for the search's summary
    broken: Check       # True where the plan breaks the rule (ints or arrays)
    explain: Explain    # (field, problem, fix) for one plan that breaks it

    def error(self, j: JobFacts, p: PlanFacts) -> RuleBroken:
        return RuleBroken(self.name, *self.explain(j, p))


def _layer_split_broken(j: JobFacts, p: PlanFacts) -> Any:
    if p.first_stage_layers is None and p.last_stage_layers is None:
        return p.pp * p.vpp > j.num_layers     # the only split stage_layer_split refuses
    try:
        stage_layer_split(j.num_layers, p.pp, p.vpp, p.first_stage_layers, p.last_stage_layers)
    except PlanError:
        return True
    return False


def _layer_split_explain(j: JobFacts, p: PlanFacts) -> tuple[str, str, str]:
    try:
        stage_layer_split(j.num_layers, p.pp, p.vpp, p.first_stage_layers, p.last_stage_layers)
    except PlanError as e:
        return e.field, e.problem, e.fix
    return "plan.pp", "the layers split", ""   # pragma: no cover - only called on a broken plan


def _precision_missing(j: JobFacts, p: PlanFacts) -> Any:
    if isinstance(p.precision, np.ndarray):
        return np.array([x is not None and x not in j.precisions for x in p.precision.ravel()],
                        dtype=bool).reshape(p.precision.shape)
    return p.precision is not None and p.precision not in j.precisions


def _precision_explain(j: JobFacts, p: PlanFacts) -> tuple[str, str, str]:
    have = [d for d in ("bf16", "fp16", "fp8", "fp32") if d in j.precisions]
    what = "FP8 tensor cores" if p.precision == "fp8" else f"{p.precision} peak"
    return ("plan.precision", f"{j.gpu} has no {what} (its spec gives peaks for {', '.join(j.precisions)})",
            f"use --precision {' or '.join(have[:2]) or 'bf16'}, or a GPU with {p.precision} "
            f"(`clustertwin list gpus`; a GPU file lists its peaks under peak_flops)")


def _m(p: PlanFacts) -> Any:
    return p.global_batch // (p.dp * p.micro_batch)


RULES: tuple[Rule, ...] = (
    # a precision the GPU has no peak for would be priced at another dtype's peak: a wrong number
    Rule("precision_gpu", "job", "the GPU has no peak for the precision (FP8 on an A100, say)",
         _precision_missing, _precision_explain),
    Rule("gpus", "size", "tp x pp x cp x dp is not the GPU count",
         lambda j, p: p.tp * p.pp * p.cp * p.dp != j.num_gpus,
         lambda j, p: ("plan", f"tp*pp*dp*cp = {p.tp}*{p.pp}*{p.dp}*{p.cp} = {p.tp * p.pp * p.dp * p.cp} but the "
                               f"cluster has {j.num_gpus} GPUs",
                       "make the product equal the GPU count (or leave dp out to derive it)")),
    Rule("tp_heads", "tp", "tp does not divide the attention heads",
         lambda j, p: j.heads % p.tp != 0,
         lambda j, p: ("plan.tp", f"{p.tp} does not divide the {j.heads} attention heads", "choose tp dividing the heads")),
    Rule("tp_kv_heads", "tp", "tp and the KV heads do not divide each other",
         lambda j, p: (j.kv_heads % p.tp != 0) & (p.tp % j.kv_heads != 0),
         lambda j, p: ("plan.tp", f"{p.tp} and the {j.kv_heads} KV heads do not divide each other",
                       "choose tp dividing the KV heads (or a multiple of them)")),
    Rule("tp_ffn", "tp", "tp does not divide the MLP width",
         lambda j, p: j.ffn % p.tp != 0,
         lambda j, p: ("plan.tp", f"{p.tp} does not divide ffn_hidden_size={j.ffn}", "choose tp dividing the MLP width")),
    Rule("tp_nodes", "tp", "a TP group would straddle two nodes",
         lambda j, p: (((p.tp > j.gpus_per_node) & (p.tp % j.gpus_per_node != 0))
                       | ((p.tp < j.gpus_per_node) & (j.gpus_per_node % p.tp != 0))),
         lambda j, p: ("plan.tp", f"{p.tp} does not tile nodes of {j.gpus_per_node} GPUs (a TP group would straddle "
                                  "two nodes)", f"use tp dividing {j.gpus_per_node} or a multiple of it")),
    Rule("tp_overlap_nodes", "tp", "TP communication overlap held on, with a TP group beyond one NVLink domain",
         lambda j, p: p.overlap_tp & _not(tp_overlap_possible(p.tp, j.gpus_per_node)),
         lambda j, p: ("plan.overlap_tp_comm", "TP communication overlap (Transformer Engine userbuffers) needs the "
                       f"TP group within one NVLink domain, and tp={p.tp} spans nodes of {j.gpus_per_node} GPUs",
                       f"set overlap_tp_comm=0 or tp <= {j.gpus_per_node}")),
    Rule("vpp_without_pp", "layout", "interleaving (vpp > 1) without pipeline parallelism",
         lambda j, p: (p.vpp > 1) & (p.pp == 1),
         lambda j, p: ("plan.vpp", f"{p.vpp} virtual stages need pipeline parallelism", "set pp > 1 or vpp = 1")),
    Rule("layer_split", "layout", "pp x vpp chunks exceed the layers", _layer_split_broken, _layer_split_explain),
    Rule("dualpipe_layout", "layout", "DualPipe asked for with an odd pipeline or interleaving",
         lambda j, p: p.dualpipe & (p.pp > 1) & ((p.pp % 2 == 1) | (p.vpp > 1)),
         lambda j, p: ("plan.pp_schedule", f"DualPipe puts stages i and pp-1-i on one rank and is not interleaved "
                                           f"(pp={p.pp}, vpp={p.vpp})",
                       "choose an even pp with vpp=1, or schedule=1f1b")),
    Rule("cp_seq_len", "layout", "cp does not divide the sequence length",
         lambda j, p: j.seq_len % p.cp != 0,
         lambda j, p: ("plan.cp", f"{p.cp} does not divide seq_len={j.seq_len}", "choose cp dividing the sequence length")),
    Rule("ep_dense", "experts", "expert parallelism for a model without experts",
         lambda j, p: (p.ep > 1) & (j.experts == 0),
         lambda j, p: ("plan.ep", f"ep={p.ep} but {j.model} has no experts", "set ep=1 for a dense model")),
    Rule("ep_overlap_dense", "experts", "the MoE all-to-all overlap asked for a model without experts",
         lambda j, p: p.overlap_ep & (j.experts == 0),
         lambda j, p: ("plan.overlap_ep_comm", f"{j.model} has no experts, so there is no all-to-all to overlap",
                       "leave overlap_ep_comm out for a dense model")),
    Rule("ep_experts", "experts", "ep does not divide the experts",
         lambda j, p: (p.ep > 1) & (j.experts % p.ep != 0),
         lambda j, p: ("plan.ep", f"{p.ep} does not divide the {j.experts} experts",
                       "choose ep dividing the number of experts")),
    Rule("etp_expert_width", "experts", "etp does not divide the expert MLP width",
         lambda j, p: (p.ep > 1) & (j.expert_ffn % p.expert_tp != 0),
         lambda j, p: ("plan.etp", f"{p.expert_tp} does not divide the expert width {j.expert_ffn}",
                       "choose an expert tensor-parallel size dividing the expert MLP width")),
    Rule("ep_dp_cp", "experts", "ep x etp does not divide tp x cp x dp",
         lambda j, p: (p.ep > 1) & ((p.tp * p.cp * p.dp) % (p.ep * p.expert_tp) != 0),
         lambda j, p: ("plan.ep", f"ep*etp = {p.ep}*{p.expert_tp} does not divide tp*cp*dp = {p.tp * p.cp * p.dp}",
                       "experts fold onto tp x cp x dp: choose ep (and etp, default tp) dividing it")),
    Rule("batch", "batch", "dp x micro-batch does not divide the global batch",
         lambda j, p: p.global_batch % (p.dp * p.micro_batch) != 0,
         lambda j, p: ("plan.global_batch", f"{p.global_batch} is not divisible by dp*micro_batch = "
                                            f"{p.dp}*{p.micro_batch}",
                       "choose a global batch that is a multiple of dp*micro_batch")),
    Rule("interleave_microbatches", "batch", "interleaving needs the micro-batches to be a multiple of pp",
         lambda j, p: (p.vpp > 1) & (_m(p) % p.pp != 0) & (not j.can.any_interleaved_microbatches),
         lambda j, p: ("plan.global_batch", f"interleaved schedule needs micro-batches ({_m(p)}) divisible by "
                                            f"pp={p.pp}",
                       "choose a global batch giving a multiple of pp micro-batches, vpp=1, or --framework "
                       "meta-llama3 (the Llama 3 paper's schedule takes any number)")),
    # ---- what the framework can run (specs/framework.py, Capabilities) ----
    Rule("framework_tp", "framework", "the framework has no tensor parallelism",
         lambda j, p: (p.tp > 1) & (not j.can.tensor_parallel),
         lambda j, p: ("plan.tp", f"{j.framework} has no tensor-parallel layers (tp={p.tp})",
                       "set tp=1 or use --framework megatron")),
    Rule("framework_pp", "framework", "the framework has no pipeline parallelism",
         lambda j, p: (p.pp > 1) & (not j.can.pipeline_parallel),
         lambda j, p: ("plan.pp", f"{j.framework} has no pipeline schedule (pp={p.pp})",
                       "set pp=1 or use --framework megatron")),
    Rule("framework_vpp", "framework", "the framework has no interleaved pipeline schedule",
         lambda j, p: (p.vpp > 1) & (not j.can.interleaved_pp),
         lambda j, p: ("plan.vpp", f"{j.framework} has no interleaved pipeline schedule (vpp={p.vpp})",
                       "set vpp=1 or use --framework megatron")),
    Rule("framework_cp", "framework", "the framework has no context parallelism (ring attention)",
         lambda j, p: (p.cp > 1) & (not j.can.context_parallel),
         lambda j, p: ("plan.cp", f"{j.framework} has no context parallelism (ring attention over the sequence)",
                       "set cp=1 or use --framework megatron")),
    Rule("framework_ep", "framework", "the framework has no expert parallelism",
         lambda j, p: (p.ep > 1) & (not j.can.expert_parallel),
         lambda j, p: ("plan.ep", f"{j.framework} has no expert parallelism", "set ep=1 or use --framework megatron")),
    Rule("framework_dualpipe", "framework", "the framework has no DualPipe schedule",
         lambda j, p: p.dualpipe & (p.pp > 1) & (not j.can.dualpipe),
         lambda j, p: ("plan.pp_schedule", f"{j.framework} has no DualPipe schedule (DeepSeek-V3 report Sec. "
                                           "3.2.1: DeepSeek's HAI-LLM runs it)",
                       "set schedule=1f1b, or use --framework hai-llm")),
    Rule("framework_etp", "framework", "the framework splits experts over etp = 1 or tp only",
         lambda j, p: (p.ep > 1) & (not j.can.expert_tp_any) & (p.expert_tp != 1) & (p.expert_tp != p.tp),
         lambda j, p: ("plan.etp", f"{j.framework} splits experts over etp=1 or etp=tp only, not {p.expert_tp}",
                       f"set etp=1 or etp={p.tp}, or use --framework megatron")),
    # ---- the options (checked after the framework can run the structure) ----
    # Megatron-LM, megatron/training/arguments.py, validate_args (NVIDIA/Megatron-LM @000c4ac):
    #   if args.tp_comm_overlap: assert args.sequence_parallel == True, 'Tensor parallel communication/GEMM
    #   overlap can happen only when sequence parallelism is enabled'
    Rule("tp_overlap_sp", "options", "TP communication overlap without sequence parallelism",
         lambda j, p: tp_overlap_without_sp(p),
         lambda j, p: ("plan.overlap_tp_comm", f"TP communication overlap needs sequence parallelism (it overlaps "
                       f"the all-gather and reduce-scatter SP puts around each GEMM; Megatron-LM asserts it), and "
                       f"the plan has tp={p.tp} without sp", "set sp=1, or overlap_tp_comm=0")),
    Rule("framework_tp_overlap", "options", "the framework cannot overlap TP communication with GEMMs",
         lambda j, p: p.overlap_tp & (p.tp > 1) & (not j.can.tp_overlap),
         lambda j, p: ("plan.overlap_tp_comm", f"{j.framework} cannot overlap TP communication with the GEMMs",
                       "set overlap_tp_comm=0 or use --framework megatron")),
    Rule("framework_zero", "options", "the framework has no such ZeRO stage",
         lambda j, p: _not(_isin(p.zero_stage, j.can.zero_stages)),
         lambda j, p: ("plan.zero_stage", f"{j.framework} has no ZeRO-{p.zero_stage}",
                       f"use zero_stage in {{{', '.join(map(str, j.can.zero_stages))}}} or --framework megatron")),
    Rule("framework_zero_pp", "options", "the framework cannot shard gradients under pipeline parallelism",
         lambda j, p: (p.zero_stage >= 2) & (p.pp > 1) & (not j.can.sharded_grads_with_pp),
         lambda j, p: ("plan.zero_stage", f"{j.framework} cannot run ZeRO-{p.zero_stage} with pipeline parallelism "
                                          f"(pp={p.pp})", "use zero_stage <= 1, pp=1, or --framework megatron")),
    Rule("framework_ddp", "options", "the framework runs plain DDP (ZeRO-0) only without model parallelism",
         lambda j, p: ((p.zero_stage == 0) & (p.dp * p.cp > 1) & ((p.tp > 1) | (p.pp > 1) | (p.cp > 1))
                       & (not j.can.ddp_with_model_parallel)),
         lambda j, p: ("plan.zero_stage", f"{j.framework} runs DDP (zero_stage=0) only as the sole parallelism, "
                                          f"not with tp={p.tp}, pp={p.pp}, cp={p.cp}",
                       "use zero_stage=3 (FSDP), tp=pp=cp=1, or --framework megatron")),
)

RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)
_BY_NAME = {r.name: r for r in RULES}


def rule(name: str) -> Rule:
    """The rule called ``name``."""
    return _BY_NAME[name]


def rules_at(*stages: str) -> tuple[Rule, ...]:
    """The rules of the given search stages, in table order."""
    return tuple(r for r in RULES if r.stage in stages)


def first_broken(j: JobFacts, p: PlanFacts, rules: Iterable[Rule] = RULES) -> Rule | None:
    """The first rule one plan (ints) breaks, or None."""
    for r in rules:
        if r.broken(j, p):
            return r
    return None


def first_broken_index(j: JobFacts, p: PlanFacts, rules: tuple[Rule, ...] = RULES) -> np.ndarray:
    """Per plan of an array of plans: the index in ``rules`` of the first rule it breaks, -1 for none.
    Rules that read fields the arrays leave unset (say global_batch None) are skipped by passing a
    subset of the table."""
    shape = np.broadcast(*[np.asarray(getattr(p, f)) for f in ("tp", "pp", "vpp", "cp", "dp", "ep")]).shape
    out = np.full(shape, -1)
    for i, r in enumerate(rules):
        hit = np.broadcast_to(np.asarray(r.broken(j, p), dtype=bool), shape) & (out < 0)
        out[hit] = i
    return out


def check_rules(j: JobFacts, p: PlanFacts, rules: Iterable[Rule] = RULES) -> None:
    """Raise the PlanError of the first rule one plan breaks."""
    r = first_broken(j, p, rules)
    if r is not None:
        raise r.error(j, p)


def rules_markdown() -> str:
    """The rule table as docs/model.md shows it (a test keeps the two equal)."""
    lines = ["| rule | checked when the search knows | rules out | field |", "|---|---|---|---|"]
    example = JobFacts(num_layers=1, heads=1, kv_heads=1, ffn=1, gpus_per_node=1, num_gpus=1, seq_len=1)
    for r in RULES:
        fields = {"layer_split": "plan.pp"}   # plan.first_stage_layers when those are set
        field = fields.get(r.name) or r.explain(example, PlanFacts(1, global_batch=1, zero_stage=2))[0]
        lines.append(f"| `{r.name}` | {r.stage} | {r.describe} | `{field}` |")
    return "\n".join(lines)
