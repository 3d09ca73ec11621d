"""TrainingJob: a model on a cluster under a plan, and the checks that the plan divides the job."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError

from ..errors import PlanError
from .hardware import ClusterSpec
from .model import Frozen, ModelSpec
from .plan import Plan, _first_error

Framework = Literal["megatron", "nemo", "torchtitan", "deepspeed", "pytorch-eager", "pytorch-compile"]
FRAMEWORKS: tuple[str, ...] = ("megatron", "nemo", "torchtitan", "deepspeed", "pytorch-eager", "pytorch-compile")


class TrainingJob(Frozen):
    model: ModelSpec
    cluster: ClusterSpec
    plan: Plan
    seq_len: int = Field(gt=0, le=100_000_000)
    framework: Framework = "megatron"
    tokens: float | None = Field(None, gt=0, description="tokens to train (for time-to-train)")

    @property
    def tokens_per_step(self) -> int:
        return self.plan.global_batch * self.seq_len  # type: ignore[operator]


def stage_layer_split(num_layers: int, pp: int, vpp: int, first: int | None = None,
                      last: int | None = None) -> list[int]:
    """Transformer layers per virtual stage (pp*vpp chunks, in pipeline order).

    Even split when the layers divide; otherwise as even as possible with the spare layers on the
    middle chunks, since the first and last chunks also hold the embedding and the loss. This is
    the split Llama 3 and NeMo use when the layers plus two divide (first and last chunk one layer
    fewer), and what torch pipelining and Megatron-Core's pipeline layouts give otherwise. A plan is
    rejected only when a chunk would get no layer. ``first``/``last`` set the first and last chunks
    explicitly (Megatron-Core's --decoder-first/last-pipeline-num-layers) and the chunks between
    them share the rest evenly.
    """
    chunks = pp * vpp
    if first is not None or last is not None:
        f, l = first or 0, last or 0
        middle = chunks - (first is not None) - (last is not None)
        rest = num_layers - f - l
        if middle <= 0 or rest <= 0 or rest % middle:
            raise PlanError("plan.first_stage_layers",
                            f"{num_layers} layers less first={first}, last={last} do not split evenly over the "
                            f"other {max(middle, 0)} of {pp}*{vpp} pipeline chunks",
                            "choose first/last stage layers leaving a multiple of the remaining chunks")
        split = [rest // middle] * chunks
        if first is not None:
            split[0] = f
        if last is not None:
            split[-1] = l
        return split
    if num_layers < chunks:
        raise PlanError("plan.pp", f"{num_layers} layers cannot fill pp*vpp = {pp}*{vpp} = {chunks} pipeline chunks",
                        "choose pp*vpp at most the number of layers")
    base, spare = divmod(num_layers, chunks)
    split = [base] * chunks
    for i in (list(range(1, chunks - 1)) + [0, chunks - 1])[:spare]:   # middle chunks first
        split[i] += 1
    return split


def check_plan(model: ModelSpec, cluster: ClusterSpec, plan: Plan, seq_len: int) -> Plan:
    """Resolve dp and check that the plan divides the model and the cluster; returns the resolved plan."""
    n = cluster.num_gpus
    plan = plan.resolved(n)
    if plan.gpus != n:
        raise PlanError("plan", f"tp*pp*dp*cp = {plan.tp}*{plan.pp}*{plan.dp}*{plan.cp} = {plan.gpus} but the cluster has {n} GPUs",
                        "make the product equal the GPU count (or leave dp out to derive it)")
    if model.num_heads % plan.tp:
        raise PlanError("plan.tp", f"{plan.tp} does not divide the {model.num_heads} attention heads",
                        "choose tp dividing the heads")
    kv = model.kv_heads
    if kv % plan.tp and plan.tp % kv:
        raise PlanError("plan.tp", f"{plan.tp} and the {kv} KV heads do not divide each other",
                        "choose tp dividing the KV heads (or a multiple of them)")
    if model.ffn_hidden_size % plan.tp:
        raise PlanError("plan.tp", f"{plan.tp} does not divide ffn_hidden_size={model.ffn_hidden_size}",
                        "choose tp dividing the MLP width")
    g = cluster.gpus_per_node
    if (plan.tp > g and plan.tp % g) or (plan.tp < g and g % plan.tp):
        raise PlanError("plan.tp", f"{plan.tp} does not tile nodes of {g} GPUs (a TP group would straddle two nodes)",
                        f"use tp dividing {g} or a multiple of it")
    if plan.tp > g and plan.overlap_tp_comm is True:
        raise PlanError("plan.overlap_tp_comm", f"TP communication overlap (Transformer Engine userbuffers) needs the "
                        f"TP group within one NVLink domain, and tp={plan.tp} spans nodes of {g} GPUs",
                        f"set overlap_tp_comm=0 or tp <= {g}")
    if seq_len <= 0:
        raise PlanError("seq_len", f"{seq_len} must be positive", "give the training sequence length")
    if plan.vpp > 1 and plan.pp == 1:
        raise PlanError("plan.vpp", f"{plan.vpp} virtual stages need pipeline parallelism", "set pp > 1 or vpp = 1")
    stage_layer_split(model.num_layers, plan.pp, plan.vpp, plan.first_stage_layers, plan.last_stage_layers)
    if seq_len % plan.cp:
        raise PlanError("plan.cp", f"{plan.cp} does not divide seq_len={seq_len}", "choose cp dividing the sequence length")
    if plan.ep > 1:
        if not model.is_moe:
            raise PlanError("plan.ep", f"ep={plan.ep} but {model.name} has no experts", "set ep=1 for a dense model")
        if model.moe_num_experts % plan.ep:
            raise PlanError("plan.ep", f"{plan.ep} does not divide the {model.moe_num_experts} experts",
                            "choose ep dividing the number of experts")
        etp = plan.etp or plan.tp
        if model.expert_ffn % etp:
            raise PlanError("plan.etp", f"{etp} does not divide the expert width {model.expert_ffn}",
                            "choose an expert tensor-parallel size dividing the expert MLP width")
        if (plan.tp * plan.cp * plan.dp) % (plan.ep * etp):  # type: ignore[operator]
            raise PlanError("plan.ep", f"ep*etp = {plan.ep}*{etp} does not divide tp*cp*dp = "
                            f"{plan.tp * plan.cp * plan.dp}",  # type: ignore[operator]
                            "experts fold onto tp x cp x dp: choose ep (and etp, default tp) dividing it")
    gb = plan.global_batch
    if gb is None:
        gb = plan.dp * plan.micro_batch * max(1, plan.pp * (2 if plan.pp > 1 else 1))  # type: ignore[operator]
        plan = plan.model_copy(update={"global_batch": gb})
    if gb % (plan.dp * plan.micro_batch):  # type: ignore[operator]
        raise PlanError("plan.global_batch", f"{gb} is not divisible by dp*micro_batch = {plan.dp}*{plan.micro_batch}",
                        "choose a global batch that is a multiple of dp*micro_batch")
    m = gb // (plan.dp * plan.micro_batch)  # type: ignore[operator]
    if plan.vpp > 1 and m % plan.pp:
        raise PlanError("plan.global_batch", f"interleaved schedule needs micro-batches ({m}) divisible by pp={plan.pp}",
                        "choose a global batch giving a multiple of pp micro-batches, or vpp=1")
    return plan


def make_job(model: ModelSpec, cluster: ClusterSpec, plan: Plan, seq_len: int | None = None,
             framework: str = "megatron", tokens: float | None = None) -> TrainingJob:
    """A checked TrainingJob (dp and global batch resolved)."""
    s = model.max_seq_len if seq_len is None else seq_len
    if s <= 0:
        raise PlanError("seq_len", f"{s} must be positive", "give the training sequence length")
    resolved = check_plan(model, cluster, plan, s)
    try:
        return TrainingJob(model=model, cluster=cluster, plan=resolved, seq_len=s, framework=framework, tokens=tokens)
    except ValidationError as e:
        raise PlanError(*_first_error(e, "job")) from None
