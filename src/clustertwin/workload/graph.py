"""The workload graph of one iteration: per pipeline stage, the blocks (embedding, layers, head)
each with forward/backward/recompute ops for one micro-batch, the pipeline p2p ops, and the
once-per-iteration ops (DP gradient sync, ZeRO parameter gathers, optimizer)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

from ..arith import where
from ..parallel.layout import expert_dp, expert_tp, stage_layer_split
from ..parallel.rules import tp_overlap_possible
from ..specs import TrainingJob
from ..specs.framework import (FrameworkProfile, adam_step_bytes, for_plan, fsdp_per_unit, get_framework,
                               pipeline_schedule)
from ..specs.model import ModelSpec
from ..specs.plan import Plan, ResolvedPlan
from .ops import Op, OpKind, Phase
from .moe import load_factor
from .transformer import LayerContext, collective, embedding_ops, head_ops, layer_ops, mtp_ops, op_sac_recompute
from ..constants import value

# torch's own memory passes as torchtitan runs them (constants fsdp2.*, optimizer.torch_*)
_FOREACH_ADAMW_BYTES = value("optimizer.torch_foreach_adamw_bytes_per_param")
_CLIP_BYTES = value("optimizer.torch_clip_grad_norm_bytes_per_param")
_COPY_OUT_BYTES = value("fsdp2.copy_out_bytes_per_element")
_COPY_IN_READ_BYTES = value("fsdp2.reduce_copy_in_read_bytes_per_element")
_FP8_GATHER = value("memory.fp8_param_gather_bytes_per_param")


def param_gather_bytes(params, embedding, param_bytes: float, precision: str, fw: FrameworkProfile):
    """Bytes the ZeRO-1/2 parameter all-gather moves for ``params`` parameters, of them ``embedding`` of the
    embedding and output layer: 16-bit (``param_bytes``) each, or, under Megatron-Core fp8_param_gather (FP8
    plans with fp8_params), the GEMM weights in FP8 (memory.fp8_param_gather_bytes_per_param) beside the
    16-bit embedding and output layer. Floats or arrays; the norms' few weights are counted with the GEMM
    weights, as the memory model does (stage_memory)."""
    if precision == "fp8" and fw.fp8_params:
        return (params - embedding) * _FP8_GATHER + embedding * param_bytes
    return params * param_bytes


@dataclass(frozen=True)
class Block:
    """Ops of one block for one micro-batch, repeated ``repeat`` times on the stage."""

    name: str                      # embedding | layer | moe_layer | head
    fwd: tuple[Op, ...]
    bwd: tuple[Op, ...]
    recompute: tuple[Op, ...]      # ops run again before the backward (by recompute mode)
    repeat: int


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one rank of a stage, by how they are sharded."""

    dense: float        # replicated over dp*cp (attention, dense MLP, norms, shared experts, router)
    expert: float       # routed experts: replicated over (dp*cp)/ep
    embedding: float    # embedding / head on this stage (dense-sharded like the rest)

    @property
    def total(self) -> float:
        return self.dense + self.expert + self.embedding


@dataclass(frozen=True)
class StageGraph:
    stage: int
    chunk_layers: tuple[int, ...]       # transformer layers in each virtual chunk of this stage
    blocks: tuple[Block, ...]
    p2p: tuple[Op, ...]                 # pipeline send/recv per micro-batch and chunk boundary
    step_ops: tuple[Op, ...]            # once per iteration
    microbatch_dp_ops: tuple[Op, ...]   # ZeRO-3/FSDP: gathers, grad reduce (FSDP2: copies) per micro-batch
    params: StageParams
    layers_dense: int
    layers_moe: int

    def ops(self, phase: Phase) -> list[tuple[Op, int]]:
        out = []
        for b in self.blocks:
            src = {Phase.FWD: b.fwd, Phase.BWD: b.bwd, Phase.RECOMPUTE: b.recompute}[phase]
            out += [(op, b.repeat) for op in src]
        return out


@dataclass(frozen=True)
class WorkloadGraph:
    job: TrainingJob
    framework: FrameworkProfile
    plan: ResolvedPlan
    context: LayerContext
    num_microbatches: int
    stages: tuple[StageGraph, ...]

    @cached_property
    def distinct_stages(self) -> tuple[StageGraph, ...]:
        seen: dict[tuple, StageGraph] = {}
        for s in self.stages:
            key = (s.layers_dense, s.layers_moe, tuple(b.name for b in s.blocks))
            seen.setdefault(key, s)
        return tuple(seen.values())


def resolve_overlaps(plan: ResolvedPlan, fw: FrameworkProfile, gpus_per_node: int | None = None) -> ResolvedPlan:
    """Fill the plan's unset overlap options and attention kernel with the framework's defaults.
    TP overlap by default only where it is possible (``parallel.rules.tp_overlap_possible``: the TP
    group in one NVLink domain of ``gpus_per_node``, and sequence parallelism on)."""
    update = {}
    for name in ("overlap_dp_comm", "overlap_param_gather", "overlap_tp_comm", "overlap_pp_comm"):
        if getattr(plan, name) is None:
            update[name] = getattr(fw, name)
    if update.get("overlap_tp_comm") and plan.tp > 1 and (
            not plan.sp or (gpus_per_node is not None and not tp_overlap_possible(plan.tp, gpus_per_node))):
        update["overlap_tp_comm"] = False
    if plan.attention_kernel is None:
        update["attention_kernel"] = fw.attention_kernel
    if plan.moe_dispatcher is None:
        update["moe_dispatcher"] = fw.moe_dispatcher
    if plan.grad_reduce_dtype is None:
        update["grad_reduce_dtype"] = "fp32" if fw.grad_reduce_bytes >= 4 else "bf16"
    if getattr(plan, "pp_schedule", None) is None:
        update["pp_schedule"] = pipeline_schedule(fw, None, plan.pp, plan.vpp)
    return plan.model_copy(update=update) if update else plan


def layer_context(model: ModelSpec, plan: Plan, seq_len: int, fw: FrameworkProfile) -> LayerContext:
    t, cp = plan.tp, plan.cp
    etp = expert_tp(plan)
    act_bytes = 4 if plan.precision == "fp32" else 2
    mla: tuple[int, ...] = ()
    if model.mla:
        mla = (model.mla.q_lora_rank or 0, model.mla.kv_lora_rank, model.mla.qk_rope_head_dim)
    return LayerContext(
        micro_batch=plan.micro_batch, seq_len=seq_len, tokens=plan.micro_batch * seq_len // cp,
        hidden=model.hidden_size, heads=model.num_heads // t, kv_heads=max(1, model.kv_heads // t),
        qk_head_dim=model.qk_head_dim, v_head_dim=model.v_head_dim, ffn=model.ffn_hidden_size // t,
        tp=t, cp=cp, sp=plan.sp and t > 1, gated=model.gated, norm=model.norm, rope=model.positions == "rope",
        bias=model.bias, dropout=getattr(model, "dropout", 0.0) > 0, attention_kernel=plan.attention_kernel or "flash",
        gemm_dtype=plan.precision, act_bytes=act_bytes,
        fused_bias_act=fw.fused_bias_act, fused_residual=fw.fused_residual, fused_rope=fw.fused_rope,
        fused_norm=fw.fused_norm, vocab_pad=fw.vocab_pad_multiple,
        # Megatron-family frameworks (they pad the vocabulary) run Megatron's vocab-parallel loss
        loss="fused" if fw.fused_cross_entropy else ("vocab_parallel" if fw.vocab_pad_multiple > 1 else "eager"),
        experts_local=model.moe_num_experts // plan.ep if model.is_moe else 0, top_k=model.moe_top_k,
        ep=plan.ep, expert_ffn=model.expert_ffn // etp if model.is_moe else 0,
        shared_ffn=model.shared_ffn // t if model.is_moe else 0, num_experts=model.moe_num_experts, mla=mla,
        moe_load_factor=_moe_load(model, plan, seq_len),
        moe_node_dedup=_node_dedup(model, plan), etp=etp if model.is_moe else 1,
        moe_dispatcher=(getattr(plan, "moe_dispatcher", None) or "alltoall") if model.is_moe else "alltoall",
        moe_pad_capacity=_pad_capacity(model, plan),
        sp_keeps_gathered=fw.sp_saves_gathered_input, cp_ring=fw.cp_ring, cp_ring_compiled=fw.cp_ring_compiled,
        fp8_recipe=getattr(plan, "fp8_recipe", None) or "delayed",
    )


def _node_dedup(model: ModelSpec, plan) -> tuple[int, ...]:
    """(top_k, expert groups, groups per token) when the dispatcher sends one copy per target node
    (deepep), else () for the plain all-to-all."""
    if not model.is_moe or plan.ep <= 1 or (getattr(plan, "moe_dispatcher", None) or "alltoall") != "deepep":
        return ()
    return (model.moe_top_k, model.moe_expert_groups, model.moe_topk_groups)


def _pad_capacity(model: ModelSpec, plan) -> float:
    """The capacity factor every expert's input is padded to (token-drop-and-pad), 0.0 when dropless."""
    if not model.is_moe or not getattr(plan, "moe_pad_to_capacity", False):
        return 0.0
    return float(plan.moe_capacity_factor)


def _moe_load(model: ModelSpec, plan, seq_len: int) -> float:
    if not model.is_moe or plan.ep <= 1 or _pad_capacity(model, plan):
        return 1.0   # padded to capacity: every rank runs c x the mean (priced in the routed tokens)
    tokens = plan.micro_batch * seq_len // plan.cp // plan.tp
    factor, _ = load_factor(getattr(plan, "moe_routing", "uniform"), getattr(plan, "moe_placement", "sequential"),
                            model.moe_num_experts, model.moe_top_k, plan.ep, max(1, tokens),
                            getattr(plan, "moe_capacity_factor", None))
    return factor


def recompute_mode(recompute: str, fw: FrameworkProfile) -> str:
    """What a plan's recompute mode repeats in this framework: Megatron's ``selective`` is the
    attention core (Korthikanti et al. 2022); torchtitan's is op-level (``selective_ops``)."""
    if recompute == "selective" and fw.recompute_modules:
        return "modules:" + "+".join(sorted(fw.recompute_modules))
    if recompute == "selective" and fw.selective_recompute == "ops":
        return "selective_ops"
    if recompute == "selective" and fw.selective_recompute == "norm_up":
        return "selective_norm_up"
    return recompute


@lru_cache(maxsize=8192)
def layer_recompute_ops(c: LayerContext, moe: bool, mode: str) -> tuple[Op, ...]:
    """The ops recomputation ``mode`` repeats in one layer of context ``c`` (``recompute_ops`` of
    ``layer_ops(c, moe)``), built once per (context, layer kind, mode): a search prices it for many plans."""
    fwd, _, core = layer_ops(c, moe)
    return recompute_ops(mode, fwd, core, c, moe)


def recompute_ops(mode: str, fwd: tuple[Op, ...], core: tuple[Op, ...], c: LayerContext | None = None,
                   moe: bool = False) -> tuple[Op, ...]:
    if mode == "selective_ops" and (moe or c is None or c.mla or c.attention_kernel == "unfused"):
        mode = "selective"   # op-level SAC is priced for dense attention + MLP blocks
    if mode == "full":
        ops = fwd
    elif mode == "selective":
        ops = core
    elif mode == "selective_ops" and c is not None:
        ops = op_sac_recompute(c, fwd)
    elif mode == "selective_norm_up":
        ops = tuple(op for op in fwd if _norm_up_recomputed(op.name))
    elif mode.startswith("modules:"):
        modules = mode.removeprefix("modules:").split("+")
        ops = tuple(op for op in fwd if _module_recomputed(op.name, modules, moe))
    else:
        return ()
    return tuple(replace(op, phase=Phase.RECOMPUTE, extra={}) for op in ops)


def _module_recomputed(name: str, modules: list[str], moe: bool) -> bool:
    """Whether Megatron-Core's selective recomputation of ``modules`` repeats the forward op ``name``
    (transformer_config.py recompute_modules, core_r0.15; transformer_layer.py, multi_latent_attention.py,
    experts.py): core_attn the attention kernel; layernorm both norms; mla_up_proj the q/kv up-projections
    and RoPE (with their FP8 casts); moe_act the routed experts' activation, whose recomputed output the
    down-projection quantizes again for its weight gradient; mlp a dense layer's MLP; moe the whole MoE
    block, its dispatch and combine included; shared_experts the shared expert's MLP."""
    base = name.removesuffix(".fp8_cast")
    if "core_attn" in modules and base == "attn.flash":
        return True
    if "layernorm" in modules and base in ("norm1", "norm2"):
        return True
    if "mla_up_proj" in modules and base in ("attn.q_up", "attn.kv_up", "attn.rope"):
        return True
    if "moe_act" in modules and (base == "moe.expert.act" or name == "moe.expert.down.fp8_cast"):
        return True
    if "mlp" in modules and not moe and base.startswith("mlp.") and base != "mlp.residual":
        return True
    if "moe" in modules and moe and base.startswith("moe."):
        return True
    return "shared_experts" in modules and base.startswith("moe.shared.")


def _norm_up_recomputed(name: str) -> bool:
    """The forward ops DeepSeek-V3's backward repeats (arXiv 2412.19437): every RMSNorm and the MLA
    up-projections with the RoPE on their output (Sec. 3.2.3), and the SwiGLU whose inputs are cached
    in FP8 (Sec. 3.3.3); with their FP8 casts (the recomputed GEMM inputs are quantized again)."""
    base = name.removesuffix(".fp8_cast")
    return (base in ("norm1", "norm2", "attn.q_up", "attn.kv_up", "attn.rope") or base.endswith(".act")
            or (name.endswith(".down.fp8_cast")))


def layer_params_per_rank(model: ModelSpec, index: int, plan: Plan) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one rank."""
    t, etp = plan.tp, expert_tp(plan)
    norms = 2 * model.norm_params
    attn = model.attention_params / t
    if model.is_moe_layer(index):
        expert = model.moe_num_experts * model.expert_params / (plan.ep * etp)
        dense = attn + norms + model.router_params + model.shared_expert_params / t
        return dense, expert
    return attn + norms + model.dense_mlp_params / t, 0.0


def stage_layers(split: list[int], p: int, v: int) -> list[tuple[list[int], list[int]]]:
    """(virtual chunks, layer indices) of each pipeline stage, in model order: chunk j of stage i is
    global chunk j*p + i."""
    starts = [0]
    for n in split:
        starts.append(starts[-1] + n)
    out = []
    for i in range(p):
        chunks = [j * p + i for j in range(v)]
        out.append((chunks, [li for c in chunks for li in range(starts[c], starts[c + 1])]))
    return out


def stage_params(model: ModelSpec, plan: Plan, layer_ids: list[int], first: bool, last: bool) -> StageParams:
    """Parameters one rank of a stage holds: its layers, the embedding on the first stage, the head
    (untied, or tied across a pipeline) and the final norm on the last."""
    dense_p = expert_p = emb_p = 0.0
    for li in layer_ids:
        d, e = layer_params_per_rank(model, li, plan)
        dense_p += d
        expert_p += e
    if first:
        emb_p += model.vocab_size * model.hidden_size / plan.tp
        if model.positions == "learned":
            emb_p += model.max_seq_len * model.hidden_size
    if last:
        if not model.tied_embeddings or plan.pp > 1:
            emb_p += model.vocab_size * model.hidden_size / plan.tp
        dense_p += model.norm_params
        for _ in range(model.mtp_depth):   # the MTP modules (DeepSeek-V3 Sec. 2.2): a block, M_k, 3 norms
            d, e = layer_params_per_rank(model, model.num_layers, plan)
            dense_p += d + 2 * model.hidden_size * model.hidden_size / plan.tp + 3 * model.norm_params
            expert_p += e
    return StageParams(dense_p, expert_p, emb_p)


def pipeline_message_bytes(ctx: LayerContext, model: ModelSpec) -> float:
    """Activations (or their gradients) one stage sends the next per micro-batch and chunk boundary."""
    return ctx.tokens * model.hidden_size * ctx.act_bytes / (ctx.tp if ctx.tp > 1 else 1)


def build_graph(job: TrainingJob, framework: FrameworkProfile | str | None = None) -> WorkloadGraph:
    """The workload graph of ``job`` (under ``framework``, default the job's). Jobs are frozen, so the
    graph of a job object built recently is returned again (predict_job called on one job in a loop)."""
    if framework is None:
        hit = _GRAPHS.get(id(job))
        if hit is not None and hit[0] is job:
            return hit[1]
    graph = _build_graph(job, framework)
    if framework is None:
        if len(_GRAPHS) >= _GRAPHS_KEPT:
            _GRAPHS.pop(next(iter(_GRAPHS)))
        _GRAPHS[id(job)] = (job, graph)     # the job held: its id is not reused while it is here
    return graph


# graphs of the jobs last built, by job identity (a TrainingJob holds dicts: it does not hash)
_GRAPHS: dict[int, tuple[TrainingJob, "WorkloadGraph"]] = {}
_GRAPHS_KEPT = 32


def _build_graph(job: TrainingJob, framework: FrameworkProfile | str | None = None) -> WorkloadGraph:
    fw = get_framework(framework or job.framework) if not isinstance(framework, FrameworkProfile) else framework
    fw = for_plan(fw, job.plan)
    model, plan = job.model, resolve_overlaps(job.plan, fw, job.cluster.gpus_per_node)
    ctx = layer_context(model, plan, job.seq_len, fw)
    rc = recompute_mode(plan.recompute, fw)
    p, v = plan.pp, plan.vpp
    split = stage_layer_split(model.num_layers, p, v, plan.first_stage_layers, plan.last_stage_layers)
    m = plan.num_microbatches
    dense_f, dense_b, dense_core = layer_ops(ctx, False)
    moe_f, moe_b, moe_core = layer_ops(ctx, True) if model.is_moe else ((), (), ())
    emb_f, emb_b = embedding_ops(ctx, model.vocab_size, model.positions == "learned")
    head_f, head_b = head_ops(ctx, model.vocab_size, fw.fused_cross_entropy)
    if model.mtp_depth:   # the multi-token-prediction modules run after the output head, on its stage
        mtp_f, mtp_b = mtp_ops(ctx, model.vocab_size, fw.fused_cross_entropy, model.is_moe_layer(model.num_layers),
                               model.mtp_depth)
        head_f, head_b = (*head_f, *mtp_f), (*mtp_b, *head_b)
    p2p_bytes = pipeline_message_bytes(ctx, model)

    stages = []
    memo: dict[tuple, StageGraph] = {}
    for i, (chunks, layer_ids) in enumerate(stage_layers(split, p, v)):
        n_moe = sum(model.is_moe_layer(li) for li in layer_ids)
        n_dense = len(layer_ids) - n_moe
        first, last = i == 0, i == p - 1
        key = (n_dense, n_moe, first, last, tuple(split[c] for c in chunks))
        if key in memo:
            base = memo[key]
            stages.append(StageGraph(i, base.chunk_layers, base.blocks, base.p2p, base.step_ops,
                                     base.microbatch_dp_ops, base.params, n_dense, n_moe))
            continue
        blocks = []
        if first:
            blocks.append(Block("embedding", emb_f, emb_b, (), 1))
        if n_dense:
            blocks.append(Block("layer", dense_f, dense_b, recompute_ops(rc, dense_f, dense_core, ctx), n_dense))
        if n_moe:
            blocks.append(Block("moe_layer", moe_f, moe_b, recompute_ops(rc, moe_f, moe_core, ctx, True), n_moe))
        if last:
            blocks.append(Block("head", head_f, head_b, (), 1))
        params = stage_params(model, plan, layer_ids, first, last)
        # pipeline p2p: each chunk boundary sends activations forward and gradients backward
        p2p: tuple[Op, ...] = ()
        if p > 1:  # one activation send (forward) and one gradient send (backward) per chunk
            p2p = tuple(collective(f"pp.{d}.chunk{j}", "send_recv", "pp", p2p_bytes, ph, overlappable=True, layer="pp")
                        for j in range(v) for d, ph in (("activation", Phase.FWD), ("gradient", Phase.BWD)))
        step_ops, mb_ops = _dp_ops(model, plan, fw, params, fsdp_units(n_dense, n_moe, first or last))
        sg = StageGraph(i, tuple(split[c] for c in chunks), tuple(blocks), p2p, step_ops, mb_ops, params, n_dense, n_moe)
        memo[key] = sg
        stages.append(sg)
    return WorkloadGraph(job, fw, plan, ctx, m, tuple(stages))


def fsdp_units(n_dense: int, n_moe: int, ends: bool) -> dict[str, int]:
    """The FSDP units of a stage per parameter group: each layer is one (fully_shard per transformer
    block), the embedding, final norm and head together one more on a stage holding either (``ends``:
    the root module's fully_shard); the routed experts one per MoE layer. The root unit is gathered once
    per micro-batch, before the forward, and kept gathered through the backward: PyTorch FSDP2 clears
    the root's post-forward reshard (torch/distributed/fsdp/_fully_shard/_fsdp_state.py,
    FSDPState._lazy_init: "For the root, do not reshard after forward since for training, the
    parameters would be freed and all-gathered immediately", ``fsdp_param_group.post_forward_mesh_info
    = None``), which torchtitan's apply_fsdp keeps (``fully_shard(model, **fsdp_config)``, no
    reshard_after_forward given). Each layer unit is gathered twice (forward, backward)."""
    return {"dp_cp": n_dense + n_moe + int(ends), "edp": max(1, n_moe)}


def fsdp_keeps_root(fw: FrameworkProfile) -> bool:
    """Whether the framework's ZeRO-3 is PyTorch FSDP2 (fully_shard: the stacks marked ``fsdp2_copies``),
    which keeps the root unit gathered from the forward to the end of the backward (``fsdp_units``).
    DeepSpeed's ZeRO-3 releases and re-fetches by its own reuse-distance rules, not modelled here."""
    return fw.fsdp2_copies


def _dp_ops(model: ModelSpec, plan: ResolvedPlan, fw: FrameworkProfile, params: StageParams,
            units: dict[str, int]) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """Gradient synchronisation, ZeRO gathers, FSDP2's copies and the optimizer step of one rank of a stage."""
    dense = params.dense + params.embedding
    expert = params.expert
    dp_cp = plan.dp * plan.cp
    edp = expert_dp(plan)
    gb = fw.grad_reduce_bytes
    pb = 4 if plan.precision == "fp32" else 2
    step: list[Op] = []
    per_mb: list[Op] = []
    groups = [("dp_cp", dense, dp_cp), ("edp", expert, edp)]
    per_step = fsdp_per_step(plan, fw)
    for group, n, size in groups:
        if n <= 0 or size <= 1:
            continue
        # the root unit (embedding, final norm and head: ``fsdp_units``) is gathered in the forward only
        root = (params.embedding if group == "dp_cp" and plan.zero_stage >= 3 and not per_step and fsdp_keeps_root(fw)
                else 0.0)
        for name, kind, phase, per_microbatch, elem in dp_collectives(plan.zero_stage, per_step,
                                                                      fw.fsdp_shard_grad_op):
            held = n - root if name == "fsdp.param_all_gather.bwd" else n
            if held <= 0:
                continue
            nbytes = held * (gb if elem == "grad" else pb)
            if name == "dp.param_all_gather":
                emb = params.embedding if group == "dp_cp" else 0.0
                nbytes = param_gather_bytes(held, emb, pb, plan.precision, fw)
            (per_mb if per_microbatch else step).append(
                collective(f"{name}.{group}", kind, group, nbytes, phase, True, "step"))
        if fsdp_per_unit(plan.zero_stage, fw) and fw.fsdp2_copies:
            for op, per_microbatch in fsdp2_copy_ops(group, n, units[group], pb, gb, per_step, root,
                                                     regather=plan.zero_stage >= 3):
                (per_mb if per_microbatch else step).append(op)
    shard, adam_bytes = optimizer_traffic(dense, expert, dp_cp, edp, plan.zero_stage, pb, fw.grad_buffer_checks, gb,
                                          foreach=fw.optimizer_impl == "torch_foreach",
                                          step_bytes=adam_step_bytes(fw, plan.precision, pb))
    step.append(Op("optimizer.adam", OpKind.OPTIMIZER, Phase.STEP, flops=shard * 16.0, bytes=adam_bytes, layer="step"))
    return tuple(step), tuple(per_mb)


def fsdp2_copy_parts(params, param_bytes: int, grad_bytes: int):
    """(bytes of one all-gather's copy-out, bytes of the reduce-scatter copy-in) that FSDP2 (fully_shard)
    moves on the compute stream for ``params`` unsharded parameters: the copy-out of the gathered buffer
    into the parameters (``_COPY_OUT_BYTES`` per 16-bit element, scaled to ``param_bytes``), and the
    copy-in reading the 16-bit gradients and writing the reduce-dtype buffer (``grad_bytes`` per
    element). Floats or arrays."""
    return params * _COPY_OUT_BYTES * param_bytes / 2, params * (_COPY_IN_READ_BYTES + grad_bytes)


def fsdp2_copy_bytes(params, param_bytes: int, grad_bytes: int, gathers: int = 2):
    """Bytes FSDP2 copies on the compute stream for ``params`` unsharded parameters per gradient
    reduction: ``gathers`` copy-outs (forward and backward's re-gather) and one copy-in
    (``fsdp2_copy_parts``). Floats or arrays."""
    out, copy_in = fsdp2_copy_parts(params, param_bytes, grad_bytes)
    return gathers * out + copy_in


def fsdp2_copies(params, units: int, param_bytes: int, grad_bytes: int, per_step: bool = False, root=0.0,
                 regather: bool = True):
    """FSDP2's copies of one parameter group of a stage, as (name, phase, bytes, kernels, once per
    micro-batch?): one copy-out after each all-gather (forward, and backward's re-gather) and one
    copy-in before each reduce-scatter, each a memory-bound kernel per unit (``units``) on the compute
    stream (PyTorch FSDP2: split_with_sizes_copy in FSDPParamGroup.wait_for_unshard, _chunk_cat in
    foreach_reduce). ``per_step`` (``fsdp_per_step``): gathered once and reduced once per step.
    ``root``: the root unit's parameters among ``params`` (one of the ``units``), which the backward
    does not re-gather, so nor copy out (``fsdp_units``: FSDP2 keeps the root unsharded after the forward).
    The one definition the workload graph's ops (``fsdp2_copy_ops``) and the batch pricer use.
    ``params``, ``root`` floats or arrays (many structures). ``regather`` False (ZeRO-2 as
    reshard_after_forward=False, ``fsdp_per_unit``): no backward all-gather, so no backward copy-out."""
    out, copy_in = fsdp2_copy_parts(params, param_bytes, grad_bytes)
    if per_step:
        return (("fsdp2.copy_out", Phase.STEP, out, units, False),
                ("fsdp2.copy_in", Phase.STEP, copy_in, units, False))
    if not regather:
        return (("fsdp2.copy_out.fwd", Phase.FWD, out, units, True),
                ("fsdp2.copy_in", Phase.BWD, copy_in, units, True))
    out_bwd, _ = fsdp2_copy_parts(params - root, param_bytes, grad_bytes)
    units_bwd = units - where(root > 0, 1, 0)
    return (("fsdp2.copy_out.fwd", Phase.FWD, out, units, True),
            ("fsdp2.copy_out.bwd", Phase.BWD, out_bwd, units_bwd, True),
            ("fsdp2.copy_in", Phase.BWD, copy_in, units, True))


def fsdp2_copy_ops(group: str, params: float, units: int, param_bytes: int, grad_bytes: int,
                   per_step: bool = False, root: float = 0.0, regather: bool = True) -> tuple[tuple[Op, bool], ...]:
    """``fsdp2_copies`` of ``group`` as ops of the workload graph (memory-bound, on the compute stream,
    one kernel per unit), each with whether it runs once per micro-batch (none where it copies nothing:
    a stage holding the root unit alone copies nothing out in the backward)."""
    return tuple((Op(f"{name}.{group}", OpKind.ELEMENTWISE, phase, bytes=float(nbytes), group=group, layer="step",
                     kernels=int(kernels)), per_mb)
                 for name, phase, nbytes, kernels, per_mb in fsdp2_copies(params, units, param_bytes, grad_bytes,
                                                                          per_step, root, regather)
                 if nbytes > 0)


def fsdp_per_step(plan, fw: FrameworkProfile) -> bool:
    """FSDP that keeps a pipeline stage's parameters gathered, and its gradients unreduced, across
    the micro-batches of a step (torchtitan with PP: reshard_after_forward off, gradient sync on the
    last micro-batch): one gather and one reduce-scatter per step instead of per micro-batch."""
    return fsdp_per_unit(plan.zero_stage, fw) and plan.pp > 1 and fw.fsdp_unsharded_with_pp


def dp_collectives(zero_stage: int, per_step: bool = False,
                   shard_grad_op: bool = False) -> tuple[tuple[str, str, Phase, bool, str], ...]:
    """The data-parallel collectives of a ZeRO stage, per parameter group: (name, kind, phase, once per
    micro-batch?, element: "grad" (reduced in the framework's gradient dtype) or "param" (16-bit)).
    ``per_step``: FSDP gathering once and reducing once per step (``fsdp_per_step``). ``shard_grad_op``:
    ZeRO-2 is FSDP's SHARD_GRAD_OP (``FrameworkProfile.fsdp_shard_grad_op``): each unit gathered before
    its forward and kept for its backward, its gradients reduce-scattered after it, per micro-batch."""
    fsdp = zero_stage >= 3 or (zero_stage == 2 and shard_grad_op)
    if fsdp and per_step:
        return (("fsdp.param_all_gather", "all_gather", Phase.STEP, False, "param"),
                ("fsdp.grad_reduce_scatter", "reduce_scatter", Phase.STEP, False, "grad"))
    if zero_stage == 0:
        return (("dp.grad_allreduce", "all_reduce", Phase.STEP, False, "grad"),)
    if fsdp and zero_stage == 2:
        return (("fsdp.param_all_gather.fwd", "all_gather", Phase.FWD, True, "param"),
                ("fsdp.grad_reduce_scatter", "reduce_scatter", Phase.BWD, True, "grad"))
    if zero_stage in (1, 2):
        return (("dp.grad_reduce_scatter", "reduce_scatter", Phase.STEP, False, "grad"),
                ("dp.param_all_gather", "all_gather", Phase.STEP, False, "param"))
    # ZeRO-3 / FSDP: gather weights for forward and backward, reduce-scatter grads, per micro-batch
    return (("fsdp.param_all_gather.fwd", "all_gather", Phase.FWD, True, "param"),
            ("fsdp.param_all_gather.bwd", "all_gather", Phase.BWD, True, "param"),
            ("fsdp.grad_reduce_scatter", "reduce_scatter", Phase.BWD, True, "grad"))


def optimizer_traffic(dense, expert, dp_cp, edp, zero_stage: int, param_bytes: int,
                      grad_checks: tuple[str, ...] = (), grad_bytes: int = 4, foreach: bool = False,
                      step_bytes: float | None = None):
    """(parameters in this rank's optimizer shard, bytes the optimizer step moves): Adam over the shard
    (fp32 master, m, v; read grad; write 16-bit weights), plus the gradient-norm pass for clipping and
    zeroing the gradient buffer, plus the framework's passes over the gradient buffer before its
    reduction (``grad_checks``, FrameworkProfile.grad_buffer_checks: a NaN-check norm reads it, the
    1/dp scaling reads and writes it where dp > 1; ``grad_bytes`` per element). Floats, or arrays of
    many ranks. ``foreach``: torch's foreach AdamW over fp32 weights (one pass per foreach op) and
    clip_grad_norm_'s two passes (torchtitan) instead of the fused Adam. ``step_bytes``: what the fused
    Adam moves per parameter of the shard, from the optimizer's storage
    (specs.framework.adam_step_bytes; None: Megatron-Core's, fp32 master and moments)."""
    shard_dense = dense / (dp_cp if zero_stage >= 1 else 1)
    shard_expert = expert / (edp if zero_stage >= 1 else 1)
    shard = shard_dense + shard_expert
    if foreach:
        adam_bytes = shard * (_FOREACH_ADAMW_BYTES + _CLIP_BYTES)
    else:
        grad_buffer = (dense + expert) if zero_stage < 2 else shard
        if step_bytes is None:   # Megatron-Core's: fp32 master and moments, the fp32 gradient read once
            step_bytes = adam_step_bytes(get_framework("megatron"), "bf16", param_bytes)
        # the norm for clipping reads the fp32 main gradient of the shard; zeroing the gradient buffer
        # writes it in its own dtype (Megatron-Core's buffer is grad_reduce_dtype: fp32, or the 16-bit
        # parameter dtype without grad_reduce_in_fp32: core_r0.8.0 distributed_data_parallel.py grad_dtype,
        # param_and_grad_buffer.py ParamAndGradBuffer.reset -> grad_data.zero_())
        adam_bytes = shard * step_bytes + shard * 4 + grad_buffer * grad_bytes
    if zero_stage < 3:
        if "nan_check" in grad_checks:
            adam_bytes = adam_bytes + (dense + expert) * grad_bytes
        if "scale" in grad_checks:
            # scaled in place, dense buckets by 1/dp_cp and expert buckets by 1/edp, where those exceed 1
            dense_scaled = where(dp_cp > 1, dense, 0.0)
            expert_scaled = where(edp > 1, expert, 0.0)
            adam_bytes = adam_bytes + 2 * grad_bytes * (dense_scaled + expert_scaled)
    return shard, adam_bytes
