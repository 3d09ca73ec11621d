"""Behaviour of the core model: FLOPs, memory, pipeline bubble, step-time breakdown, monotonicity,
errors and the JSON contract. Every expected number here is derived by hand from a published formula
(Narayanan et al. 2021, Korthikanti et al. 2022) or from first principles, not read back from the code.

Tests marked ``xfail(strict=True)`` pin a defect of the model found by these tests: each states the
inputs, what the model gives and what it should give. When the model is fixed they start passing,
and strict xfail turns that into a failure so the marker gets removed.
"""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clustertwin as ct
from clustertwin.catalog import cluster_for_gpu
from clustertwin.specs.framework import get_framework
from clustertwin.errors import PlanError
from clustertwin.parallel import JobFacts, PlanFacts, first_broken, rules_at
from clustertwin.predict import Prediction, make_training_job, predict, predict_job
from clustertwin.schedule.memory import layer_activation_bytes
from clustertwin.schedule.step import BREAKDOWN_KEYS
from clustertwin.specs import ClusterSpec, ModelSpec, parse_plan
from clustertwin.workload.graph import build_graph, layer_context
from clustertwin.workload.ops import OpKind, Phase

# ---- small models, built by hand ----------------------------------------------------------------------

#: GPT-2 style (learned positions, GELU, LayerNorm with biases, untied head): 12h^2 + 13h per layer.
TINY_GPT = ModelSpec(name="tiny-gpt", num_layers=4, hidden_size=256, num_heads=4, ffn_hidden_size=1024,
                     vocab_size=1000, max_seq_len=128)
#: Llama style (RoPE, SwiGLU, RMSNorm, no biases, GQA).
SMALL = ModelSpec(name="small", num_layers=8, hidden_size=2048, num_heads=16, num_kv_heads=4,
                  ffn_hidden_size=5632, vocab_size=32000, max_seq_len=4096, positions="rope",
                  activation="swiglu", norm="rmsnorm", bias=False)
#: Megatron GPT style with dropout and tied embeddings.
SMALL_GPT = ModelSpec(name="small-gpt", num_layers=8, hidden_size=2048, num_heads=16, ffn_hidden_size=8192,
                      vocab_size=50304, max_seq_len=2048, tied_embeddings=True, dropout=0.1)
#: Mixture of experts: 8 experts, top-2.
SMALL_MOE = ModelSpec(name="small-moe", num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=4,
                      ffn_hidden_size=2816, vocab_size=32000, max_seq_len=4096, positions="rope",
                      activation="swiglu", norm="rmsnorm", bias=False, moe_num_experts=8, moe_top_k=2)
#: Uniform pipeline stages: 16 equal layers and a 256-token vocabulary, so embedding and head are negligible.
UNIFORM = ModelSpec(name="uniform", num_layers=16, hidden_size=2048, num_heads=16, ffn_hidden_size=8192,
                    vocab_size=256, max_seq_len=2048, positions="rope")

CLUSTER_32 = cluster_for_gpu("h100-sxm", 32)   # 4 nodes of 8: every kind of link is exercised


def _non_increasing(xs: list[float]) -> bool:
    return all(b <= a * (1 + 1e-12) for a, b in zip(xs, xs[1:]))


def _graph_flops(graph, phases, kinds) -> float:
    """FLOPs of one iteration summed over every rank: ops x repeat x micro-batches x ranks of a stage."""
    plan = graph.plan
    ranks_per_stage = plan.tp * plan.dp * plan.cp
    total = 0.0
    for sg in graph.stages:
        per_mb = sum(op.flops * rep for ph in phases for op, rep in sg.ops(ph) if op.kind in kinds)
        total += per_mb * graph.num_microbatches * ranks_per_stage
    return total


# ---- 1. FLOPs: Narayanan et al. (SC21) -----------------------------------------------------------------

# Table 1 of Narayanan et al. 2021: model, tensor parallel, pipeline parallel, GPUs, batch (sequences)
NARAYANAN_TABLE1 = [
    ("megatron-1.7b", 1, 1, 32, 512), ("megatron-3.6b", 2, 1, 64, 512), ("megatron-7.5b", 4, 1, 128, 512),
    ("megatron-18.4b", 8, 1, 256, 1024), ("megatron-39.1b", 8, 2, 512, 1536), ("megatron-76.1b", 8, 4, 1024, 1792),
    ("megatron-145.6b", 8, 8, 1536, 2304), ("megatron-310.1b", 8, 16, 1920, 2160),
    ("megatron-529.6b", 8, 35, 2520, 2520), ("megatron-1t", 8, 64, 3072, 3072),
]


def _table1_job(name: str, t: int, p: int, n: int, batch: int, plan_extra: str = ""):
    return make_training_job(name, gpu="a100-80gb", num_gpus=n, plan=f"tp={t},pp={p}{plan_extra}",
                             micro_batch=1, global_batch=batch, seq_len=2048)


@pytest.mark.parametrize("name,t,p,n,batch", NARAYANAN_TABLE1, ids=[r[0] for r in NARAYANAN_TABLE1])
def test_flops_per_iteration_match_narayanan(name: str, t: int, p: int, n: int, batch: int) -> None:
    """F = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) per iteration without recomputation (eq. 3 of the
    paper with the 4x of recomputation replaced by 3x). Biases are the only difference (< 0.1%)."""
    job = _table1_job(name, t, p, n, batch)
    m, s = job.model, job.seq_len
    l, h, V = m.num_layers, m.hidden_size, m.vocab_size
    narayanan = 72.0 * batch * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    ours = m.flops_per_token(s) * batch * s
    assert ours == pytest.approx(narayanan, rel=0.01)
    # the Prediction reports the same model FLOPs in the published convention (what validate compares
    # published MFUs with); MFU's own numerator halves the attention scores (causal, as the time prices them)
    pred = predict_job(job)
    assert pred.model_flops_per_step_full_attention == pytest.approx(narayanan, rel=0.01)
    causal = 72.0 * batch * s * l * h * h * (1 + s / (12 * h) + V / (12 * l * h))
    assert pred.model_flops_per_step == pytest.approx(causal, rel=0.01)


@pytest.mark.parametrize("name,t,p,n,batch", NARAYANAN_TABLE1, ids=[r[0] for r in NARAYANAN_TABLE1])
def test_graph_gemm_flops_are_6_n_tokens(name: str, t: int, p: int, n: int, batch: int) -> None:
    """Summed over all ranks, the graph's GEMMs (forward, dgrad, wgrad) do 6 x weights x tokens:
    12 h^2 per layer plus the V x h head (biases are not GEMMs, so this is exact). Causal flash attention
    does half the score FLOPs forward, and 2.5x that backward (5 GEMMs against 2)."""
    job = _table1_job(name, t, p, n, batch)
    graph = build_graph(job)
    m, s = job.model, job.seq_len
    l, h, V, a, d = m.num_layers, m.hidden_size, m.vocab_size, m.num_heads, m.qk_head_dim
    tokens = batch * s
    gemm = _graph_flops(graph, (Phase.FWD, Phase.BWD), {OpKind.GEMM})
    assert gemm == pytest.approx(6.0 * (12 * h * h * l + V * h) * tokens, rel=1e-9)
    assert gemm == pytest.approx(6.0 * m.matmul_params_active * tokens, rel=0.01)
    attn = _graph_flops(graph, (Phase.FWD, Phase.BWD), {OpKind.ATTENTION})
    causal_fwd = 2.0 * s * a * (s / 2) * (2 * d) * l * batch     # QK^T and AV over half the keys
    assert attn == pytest.approx(3.5 * causal_fwd, rel=1e-9)
    assert _graph_flops(graph, (Phase.RECOMPUTE,), {OpKind.GEMM, OpKind.ATTENTION}) == 0.0


def test_full_recompute_adds_exactly_one_forward_of_the_layers() -> None:
    job = _table1_job("megatron-39.1b", 8, 2, 512, 1536, ",recompute=full")
    graph = build_graph(job)
    every = set(OpKind)
    layer_fwd = 0.0
    for sg in graph.stages:
        for b in sg.blocks:
            if b.name in ("layer", "moe_layer"):
                assert [op.name for op in b.recompute] == [op.name for op in b.fwd]
                layer_fwd += sum(op.flops for op in b.fwd) * b.repeat
            else:  # embedding and head are not recomputed
                assert b.recompute == ()
    layer_fwd *= graph.num_microbatches * job.plan.tp * job.plan.dp * job.plan.cp
    recompute = _graph_flops(graph, (Phase.RECOMPUTE,), every)
    assert recompute == pytest.approx(layer_fwd, rel=1e-12)
    # by hand: the layers' GEMM forward is 2 x 12h^2 x l per token, the causal attention 2 s h l per token
    m, s, tokens = job.model, job.seq_len, job.tokens_per_step
    gemm_rc = _graph_flops(graph, (Phase.RECOMPUTE,), {OpKind.GEMM})
    assert gemm_rc == pytest.approx(2 * 12 * m.hidden_size ** 2 * m.num_layers * tokens, rel=1e-12)
    attn_rc = _graph_flops(graph, (Phase.RECOMPUTE,), {OpKind.ATTENTION})
    assert attn_rc == pytest.approx(2 * s * m.hidden_size * m.num_layers * tokens, rel=1e-12)
    # HFU counts that forward once more; MFU does not
    pred = predict_job(job)
    assert pred.hardware_flops_per_step - pred.model_flops_per_step == pytest.approx(recompute, rel=1e-9)
    assert pred.hfu / pred.mfu == pytest.approx(pred.hardware_flops_per_step / pred.model_flops_per_step, rel=1e-9)


def test_selective_recompute_with_flash_repeats_only_the_attention_core() -> None:
    job = _table1_job("megatron-39.1b", 8, 2, 512, 1536, ",recompute=selective,attention_kernel=flash")
    graph = build_graph(job)
    assert _graph_flops(graph, (Phase.RECOMPUTE,), {OpKind.GEMM}) == 0.0
    fwd_attn = _graph_flops(graph, (Phase.FWD,), {OpKind.ATTENTION})
    assert _graph_flops(graph, (Phase.RECOMPUTE,), {OpKind.ATTENTION}) == pytest.approx(fwd_attn, rel=1e-12)


# ---- 2. Weights, gradients, optimizer by ZeRO stage ---------------------------------------------------

def _tiny_gpt_params(tied: bool) -> int:
    """By hand: per layer QKV 3h^2+3h, projection h^2+h, MLP 8h^2+5h, two LayerNorms 4h; final norm 2h;
    token embedding Vh, learned positions Sh, and an untied head Vh."""
    h, l, V, S = 256, 4, 1000, 128
    return l * (12 * h * h + 13 * h) + 2 * h + V * h + S * h + (0 if tied else V * h)


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("cp", [1, 2])
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
@pytest.mark.parametrize("framework,w_b,g_b,o_b", [("megatron", 2, 4, 12), ("pytorch-eager", 4, 4, 8)])
def test_weight_gradient_optimizer_bytes_by_zero_stage(framework: str, w_b: int, g_b: int, o_b: int,
                                                        zero: int, cp: int, tied: bool) -> None:
    model = TINY_GPT.model_copy(update={"tied_embeddings": tied})
    P = _tiny_gpt_params(tied)
    assert model.params_total == P
    n = 4  # tp = pp = 1: dp * cp = 4 ranks share the states under ZeRO
    r = predict(model, gpu="h100-sxm", num_gpus=n, plan=f"cp={cp},zero={zero}", global_batch=8, seq_len=128,
                framework=framework)
    assert r.job.plan.dp * r.job.plan.cp == n
    assert r.graph.stages[0].params.total == P
    if framework == "megatron":
        assert g_b == get_framework("megatron").grad_reduce_bytes
    mem = r.memory.breakdown_bytes
    # a PyTorch stack's ZeRO-2 is FSDP's SHARD_GRAD_OP: parameters sharded outside computation, gradients
    # reduce-scattered per unit into the shard; Megatron's reduces once per step
    grad_op = zero == 2 and get_framework(framework).fsdp_shard_grad_op
    assert mem["weights"] == pytest.approx(w_b * P / (n if zero >= 3 or grad_op else 1), rel=1e-12)
    # Megatron's ZeRO-2 reduces once per step: with accumulation (2 micro-batches here) it holds the full buffer
    assert r.graph.num_microbatches == 8 // r.job.plan.dp // r.job.plan.micro_batch
    sharded_grads = zero >= 3 or grad_op or (zero == 2 and r.graph.num_microbatches == 1)
    assert mem["gradients"] == pytest.approx(g_b * P / (n if sharded_grads else 1), rel=1e-12)
    assert mem["optimizer"] == pytest.approx(o_b * P / (n if zero >= 1 else 1), rel=1e-12)
    assert r.memory.total_bytes == pytest.approx(sum(mem.values()))
    if zero == 2:  # one micro-batch per step: only the shard is kept
        one = predict(model, gpu="h100-sxm", num_gpus=n, plan=f"cp={cp},zero=2", global_batch=4 // cp, seq_len=128,
                      framework=framework)
        assert one.graph.num_microbatches == 1
        assert one.memory.breakdown_bytes["gradients"] == pytest.approx(g_b * P / n, rel=1e-12)


# ---- 3. Pipeline bubble ---------------------------------------------------------------------------------

@pytest.mark.parametrize("p,v,m", [(2, 1, 8), (4, 1, 8), (4, 2, 8), (4, 4, 16), (8, 2, 16), (2, 2, 4), (8, 1, 64)])
def test_bubble_is_p_minus_1_over_v_stage_times(p: int, v: int, m: int) -> None:
    r = predict(UNIFORM, gpu="h100-sxm", num_gpus=p, plan=f"pp={p},vpp={v},dp=1", global_batch=m, seq_len=2048)
    stages = r.step.stages
    assert len(stages) == p and r.graph.num_microbatches == m
    per_mb = [s.per_microbatch_s for s in stages]
    mean = sum(per_mb) / p
    assert r.breakdown_s["bubble"] == pytest.approx((p - 1) / v * mean, rel=1e-12)
    # uniform stages (16 equal layers, tiny vocabulary): t_mean ~ t_slowest, so the bubble is
    # (p-1)/(v m) of the m micro-batches' time (Narayanan 2021)
    assert max(per_mb) / min(per_mb) < 1.03
    t = max(per_mb)
    assert r.breakdown_s["bubble"] / (m * t) == pytest.approx((p - 1) / (v * m), rel=0.03)
    # a micro-batch's time: its compute and the framework's host time outside the layers ('other')
    per_step = r.breakdown_s["compute"] + r.breakdown_s["other"]
    assert r.breakdown_s["bubble"] / per_step == pytest.approx((p - 1) / (v * m), rel=0.03)


def test_no_pipeline_no_bubble() -> None:
    r = predict(UNIFORM, gpu="h100-sxm", num_gpus=8, plan="tp=2,dp=4", global_batch=32, seq_len=2048)
    assert r.breakdown_s["bubble"] == 0.0 and r.breakdown_s["pp_comm"] == 0.0


# ---- strategies: valid plans of small models on small clusters -----------------------------------------

MODELS = (SMALL, SMALL_GPT, SMALL_MOE)


@st.composite
def jobs(draw, num_gpus: int | None = None, model: ModelSpec | None = None):
    model = model or draw(st.sampled_from(MODELS))
    n = num_gpus or draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    per_node = min(n, 8)
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if per_node % t == 0]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4, 8) if (n // tp) % p == 0]))
    cp = draw(st.sampled_from([c for c in (1, 2) if (n // (tp * pp)) % c == 0]))
    dp = n // (tp * pp * cp)
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 and model.num_layers % (2 * pp) == 0 else 1
    ep = draw(st.sampled_from([e for e in (1, 2, 4) if (dp * cp) % e == 0])) if model.is_moe else 1
    mb = draw(st.sampled_from([1, 2]))
    m = draw(st.integers(1, 4)) * (pp if vpp > 1 else 1)
    plan = parse_plan("", tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, sp=draw(st.booleans()),
                      zero_stage=draw(st.integers(0, 3)),
                      recompute=draw(st.sampled_from(["none", "selective", "full"])),
                      attention_kernel=draw(st.sampled_from(["flash", "unfused"])),
                      precision=draw(st.sampled_from(["bf16", "fp8"])), micro_batch=mb, global_batch=dp * mb * m)
    seq = draw(st.sampled_from([512, 2048]))
    # a framework that can run the plan (megatron runs every plan; parallel/rules.py, framework_* rules)
    sizes = PlanFacts(tp, pp=pp, vpp=vpp, cp=cp, dp=dp, ep=ep, zero_stage=plan.zero_stage)
    runs = [f for f in ("megatron", "nemo", "deepspeed", "torchtitan", "pytorch-eager")
            if first_broken(JobFacts.of(model, cluster_for_gpu("h100-sxm", n), seq, get_framework(f)), sizes,
                            rules_at("framework", "options")) is None]
    framework = draw(st.sampled_from(runs))
    return model, n, plan, framework, seq


def _predict(model, plan, cluster: ClusterSpec, seq: int, framework: str = "megatron") -> Prediction:
    return predict(model, cluster=cluster, plan=plan, seq_len=seq, framework=framework)


# ---- 4. The breakdown sums to the step time -------------------------------------------------------------

@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_breakdown_sums_to_step_time(case) -> None:
    model, n, plan, framework, seq = case
    r = predict(model, gpu="h100-sxm", num_gpus=n, plan=plan, seq_len=seq, framework=framework)
    b = r.breakdown_s
    assert set(BREAKDOWN_KEYS) <= set(b)
    assert all(math.isfinite(v) and v >= 0.0 for v in b.values()), b
    assert r.step_time_s > 0
    assert sum(b.values()) == pytest.approx(r.step_time_s, rel=1e-12)
    assert r.tokens_per_s * r.step_time_s == pytest.approx(plan.global_batch * seq, rel=1e-12)
    assert 0.0 < r.mfu <= r.hfu * (1 + 1e-12)
    if plan.recompute == "none":
        assert r.hfu == pytest.approx(r.mfu, rel=1e-12)
    if plan.pp == 1:
        assert b["bubble"] == 0.0 and b["pp_comm"] == 0.0
    if plan.recompute == "none":
        assert b["recompute"] == 0.0
    if plan.tp == 1:
        assert b["tp_comm"] == 0.0
    if plan.cp == 1:
        assert b["cp_comm"] == 0.0
    if plan.ep == 1:
        assert b["ep_comm"] == 0.0


# ---- 5. Faster hardware is never slower ------------------------------------------------------------------

def _scaled_cluster(resource: str, k: float) -> ClusterSpec:
    node, gpu = CLUSTER_32.node, CLUSTER_32.node.gpu
    if resource == "nic":
        node = node.model_copy(update={"nic_bandwidth_bytes_per_s": node.nic_bandwidth_bytes_per_s * k})
    elif resource == "nvlink":
        node = node.model_copy(update={"scaleup_bandwidth_bytes_per_s": node.gpu_scaleup_bandwidth * k})
    elif resource == "hbm":
        node = node.model_copy(update={"gpu": gpu.model_copy(
            update={"hbm_bandwidth_bytes_per_s": gpu.hbm_bandwidth_bytes_per_s * k})})
    elif resource == "flops":
        node = node.model_copy(update={"gpu": gpu.model_copy(
            update={"peak_flops": {d: f * k for d, f in gpu.peak_flops.items()}})})
    else:
        raise AssertionError(resource)
    return CLUSTER_32.model_copy(update={"node": node})


def test_scaled_cluster_changes_only_the_resource() -> None:
    assert _scaled_cluster("nic", 2).node.node_nic_bandwidth == 2 * CLUSTER_32.node.node_nic_bandwidth
    assert _scaled_cluster("nvlink", 2).node.gpu_scaleup_bandwidth == 2 * CLUSTER_32.node.gpu_scaleup_bandwidth
    assert _scaled_cluster("hbm", 2).gpu.hbm_bandwidth_bytes_per_s == 2 * CLUSTER_32.gpu.hbm_bandwidth_bytes_per_s
    assert _scaled_cluster("flops", 2).gpu.peak("bf16") == 2 * CLUSTER_32.gpu.peak("bf16")
    assert _scaled_cluster("flops", 2).gpu.name == CLUSTER_32.gpu.name  # same hardware profile


@pytest.mark.parametrize("resource", ["nic", "nvlink", "hbm", "flops"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=jobs(num_gpus=32), k=st.sampled_from([1.1, 1.5, 2.0, 4.0, 16.0]))
def test_faster_hardware_is_never_slower(resource: str, case, k: float) -> None:
    model, _, plan, framework, seq = case
    if resource in ("flops", "hbm") and plan.cp > 1:
        # known defect with context parallelism, pinned by test_faster_compute_never_slower_with_cp below
        plan = plan.model_copy(update={"cp": 1, "global_batch": plan.global_batch * 2})
    base = _predict(model, plan, CLUSTER_32, seq, framework)
    fast = _predict(model, plan, _scaled_cluster(resource, k), seq, framework)
    assert fast.step_time_s <= base.step_time_s * (1 + 1e-12), (fast.breakdown_s, base.breakdown_s)


def test_more_bandwidth_helps_where_it_is_the_bottleneck() -> None:
    """Not just non-increasing: each resource, where it bounds the step, makes it strictly faster."""
    # gradient all-reduce over 4 nodes, one rank of the group per node (with 8 per node the ring's
    # inter-node bandwidth, 8 NICs, exceeds NVLink and NVLink bounds it)
    # (one micro-batch per rank, gb=4, so that the gradient reduction is not amortised away)
    dp_bound = "tp=8,dp=4,zero=0,overlap_dp_comm=0,gb=4"
    tp_bound = "tp=8,dp=4,overlap_tp_comm=0,gb=4"         # TP all-reduces on NVLink
    for resource, plan in [("nic", dp_bound), ("nvlink", tp_bound), ("hbm", tp_bound), ("flops", tp_bound)]:
        base = _predict(SMALL, plan, CLUSTER_32, 2048)
        fast = _predict(SMALL, plan, _scaled_cluster(resource, 2.0), 2048)
        assert fast.step_time_s < base.step_time_s * 0.99, resource


def test_faster_compute_never_slower_with_cp() -> None:
    cases = [  # (model, plan, global batch, seq_len, resource, factors) on 32 H100s
        (SMALL, "tp=8,cp=2,zero=3", 64, 4096, "flops", (1.0, 2.0, 4.0)),   # observed 0.26333, 0.26383, 0.26878 s
        (SMALL_GPT, "tp=1,cp=2,zero=1", 16, 2048, "flops", (1.0, 4.0)),    # observed 9.0741, 9.0932 ms
        (SMALL, "tp=8,cp=2,sp=1,zero=3,attention_kernel=unfused", 64, 2048, "hbm", (1.0, 2.0)),  # 0.13176, 0.13194 s
    ]
    slower = []
    for model, plan, gb, seq, resource, factors in cases:
        t = [predict(model, cluster=_scaled_cluster(resource, k), plan=plan, global_batch=gb, seq_len=seq,
                     micro_batch=2 if resource == "hbm" else 1).step_time_s for k in factors]
        if not _non_increasing(t):
            slower.append((model.name, plan, resource, t))
    assert not slower, slower


# ---- 6. Memory never grows with tp, pp or ZeRO stage; recompute ordering ----------------------------

def _memory(model: ModelSpec, n: int, **fields) -> float:
    plan = parse_plan("", global_batch=64, **fields)
    return predict(model, gpu="h100-sxm", num_gpus=n, plan=plan, seq_len=2048).memory.total_bytes


@pytest.mark.parametrize("model", [SMALL, SMALL_GPT], ids=lambda m: m.name)
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("rest", [dict(recompute="none"), dict(recompute="selective", sp=True),
                                  dict(recompute="full", cp=2), dict(attention_kernel="unfused")], ids=str)
def test_memory_never_grows_with_tp(model: ModelSpec, zero: int, pp: int, rest: dict) -> None:
    """32 GPUs, dp derived (dp = 32 / (tp pp cp))."""
    mem = [_memory(model, 32, tp=tp, pp=pp, zero_stage=zero, **rest) for tp in (1, 2, 4, 8)]
    assert _non_increasing(mem), mem


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_moe_memory_never_grows_with_tp_when_experts_split_too(zero: int) -> None:
    mem = [_memory(SMALL_MOE, 32, tp=tp, etp=tp, ep=2, zero_stage=zero) for tp in (1, 2, 4, 8)]
    assert _non_increasing(mem), mem


def test_moe_memory_never_grows_with_tp_default_etp() -> None:
    mem = [_memory(SMALL_MOE, 32, tp=tp, ep=2, zero_stage=1) for tp in (1, 2, 4, 8)]
    # observed: 5.54, 4.77, 4.70, 5.29 GB (with etp=tp: 5.54, 3.55, 2.66, 2.25 GB)
    assert _non_increasing(mem), mem


@pytest.mark.parametrize("model", [SMALL, SMALL_GPT, SMALL_MOE], ids=lambda m: m.name)
@pytest.mark.parametrize("zero", [0, 1, 2])
@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("rest", [dict(recompute="none"), dict(recompute="full", sp=True),
                                  dict(recompute="selective", cp=2, attention_kernel="unfused")], ids=str)
def test_memory_never_grows_with_pp_at_fixed_dp(model: ModelSpec, zero: int, tp: int, rest: dict) -> None:
    """dp = 2 held fixed, GPUs = tp pp cp dp. (With dp derived from a fixed GPU count and ZeRO >= 1,
    a deeper pipeline legitimately shrinks the group ZeRO shards over; see the zero=0 test below.)"""
    extra = dict(ep=2, etp=tp) if model.is_moe else {}
    cp = rest.get("cp", 1)
    mem = [_memory(model, tp * pp * cp * 2, tp=tp, pp=pp, dp=2, zero_stage=zero, **rest, **extra)
           for pp in (1, 2, 4, 8)]
    assert _non_increasing(mem), mem


@pytest.mark.parametrize("model", [SMALL, SMALL_GPT], ids=lambda m: m.name)
@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_memory_never_grows_with_pp_dp_derived_without_zero(model: ModelSpec, tp: int, recompute: str) -> None:
    mem = [_memory(model, 32, tp=tp, pp=pp, zero_stage=0, recompute=recompute) for pp in (1, 2, 4, 8)]
    assert _non_increasing(mem), mem


@pytest.mark.parametrize("model", [SMALL, SMALL_GPT, SMALL_MOE], ids=lambda m: m.name)
@pytest.mark.parametrize("tp,pp,cp", [(1, 1, 1), (2, 1, 2), (8, 1, 1), (1, 2, 1), (4, 2, 2), (2, 2, 1)])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_memory_never_grows_with_zero_stage(model: ModelSpec, tp: int, pp: int, cp: int, recompute: str) -> None:
    """32 GPUs, >= 4 layers per stage (the FSDP defect below needs <= 2)."""
    extra = dict(ep=2, etp=tp) if model.is_moe else {}
    mem = [_memory(model, 32, tp=tp, pp=pp, cp=cp, zero_stage=z, recompute=recompute, **extra) for z in range(4)]
    assert _non_increasing(mem), mem


def test_zero3_without_data_parallelism_costs_nothing_extra() -> None:
    # one GPU: ZeRO has no group to shard over, so ZeRO-3 is ZeRO-2.
    # observed: 12.100 GB (zero=2) vs 12.346 GB (zero=3): + 4 x 491.8M / 8 layers = 245.9 MB
    assert _memory(SMALL, 1, zero_stage=3) == pytest.approx(_memory(SMALL, 1, zero_stage=2), rel=1e-12)


def test_zero3_never_more_than_zero2_with_two_layers_per_stage() -> None:
    # SMALL on 32 H100s, pp=4 (2 layers + embedding on stage 0), dp=8
    # observed: 3.218 GB (zero=2) vs 3.243 GB (zero=3)
    assert _memory(SMALL, 32, pp=4, zero_stage=3) <= _memory(SMALL, 32, pp=4, zero_stage=2)


@pytest.mark.parametrize("tp,sp,cp,b", [(1, False, 1, 1), (2, True, 1, 2), (4, False, 2, 1), (8, True, 2, 4)])
@pytest.mark.parametrize("model", [SMALL, SMALL_GPT, SMALL_MOE], ids=lambda m: m.name)
def test_layer_activations_none_ge_selective_ge_full(model: ModelSpec, tp: int, sp: bool, cp: int, b: int) -> None:
    fw = get_framework("megatron")
    for kernel in ("flash", "unfused"):
        plan = parse_plan("", tp=tp, sp=sp, cp=cp, micro_batch=b, attention_kernel=kernel)
        c = layer_context(model, plan, 2048, fw)
        for moe in ((False, True) if model.is_moe else (False,)):
            none, sel, full = (layer_activation_bytes(c, moe, rc) for rc in ("none", "selective", "full"))
            assert none >= sel > full > 0
            if kernel == "unfused":
                assert none > sel    # the s^2 score tensors are what selective recomputation drops
            else:
                # flash keeps no s^2 tensor: selective drops only the core's fp32 log-sum-exp (its 16-bit
                # output stays as the output projection's input)
                assert none - sel == c.tokens * c.heads * 4


@pytest.mark.parametrize("model", [SMALL, SMALL_GPT, SMALL_MOE], ids=lambda m: m.name)
@pytest.mark.parametrize("tp,sp,cp", [(1, False, 1), (2, True, 1), (8, False, 2), (4, True, 2)])
@pytest.mark.parametrize("kernel", ["flash", "unfused"])
def test_stage_activations_none_ge_selective_ge_full(model: ModelSpec, tp: int, sp: bool, cp: int,
                                                     kernel: str) -> None:
    """pp = 1: a stage holding all 8 layers."""
    extra = dict(ep=2) if model.is_moe else {}
    acts = {rc: predict(model, gpu="h100-sxm", num_gpus=32,
                        plan=parse_plan("", tp=tp, sp=sp, cp=cp, recompute=rc, attention_kernel=kernel, **extra),
                        global_batch=64, seq_len=2048).memory.breakdown_bytes["activations"]
            for rc in ("none", "selective", "full")}
    assert acts["none"] >= acts["selective"] >= acts["full"], acts
    if kernel == "unfused":
        assert acts["none"] > acts["selective"]


def test_full_recompute_never_keeps_more_than_none() -> None:
    # SMALL on 32 H100s, pp=8 (one layer per stage), dp=4, 2 micro-batches: the last stage holds 1.
    # observed activations: none 0.6482 GB, full 0.6565 GB (+ 2 x 2048 x 2048 bytes)
    acts = {rc: predict(SMALL, gpu="h100-sxm", num_gpus=32, plan=f"pp=8,recompute={rc}", global_batch=8,
                        seq_len=2048).memory.breakdown_bytes["activations"] for rc in ("none", "full")}
    assert acts["full"] <= acts["none"], acts


def test_selective_recompute_never_keeps_less_than_full() -> None:
    # SMALL_GPT on 32 H100s, tp=8 with SP, pp=4 (2 layers per stage), unfused attention
    # observed activations: selective 0.147 GB, full 0.198 GB
    acts = {rc: predict(SMALL_GPT, gpu="h100-sxm", num_gpus=32,
                        plan=f"tp=8,pp=4,sp=1,attention_kernel=unfused,recompute={rc}", global_batch=64,
                        seq_len=2048).memory.breakdown_bytes["activations"] for rc in ("selective", "full")}
    assert acts["selective"] >= acts["full"], acts


# ---- 7. An infeasible plan says which limit it breaks ---------------------------------------------------

def test_plan_over_hbm_does_not_fit() -> None:
    r = predict("gpt3-175b", gpu="a100-80gb", num_gpus=8, plan="tp=8,pp=1,zero=1", global_batch=8, seq_len=2048)
    # 175e9 / 8 parameters per GPU, 2 + 4 bytes of weights and gradients alone: ~131 GB > 80 GB
    assert r.memory.breakdown_bytes["weights"] + r.memory.breakdown_bytes["gradients"] > 6 * 175e9 / 8 * 0.99
    assert r.fits is False and r.memory.fits is False
    assert r.memory.total_bytes > r.memory.capacity_bytes == r.job.cluster.gpu.hbm_bytes
    j = r.to_json()
    assert j["fits"] is False and j["memory_per_gpu_bytes"]["total"] > j["hbm_bytes"]
    ok = predict("gpt3-175b", gpu="a100-80gb", num_gpus=1024, plan="tp=8,pp=16,sp=1,recompute=selective",
                 global_batch=1536, seq_len=2048)
    assert ok.fits is True and ok.memory.total_bytes <= ok.memory.capacity_bytes


_GQA12 = ModelSpec(name="heads12", num_layers=8, hidden_size=768, num_heads=12, ffn_hidden_size=3072,
                   vocab_size=1000, max_seq_len=1024)


@pytest.mark.parametrize("model,n,plan,kw,field", [
    (_GQA12, 8, "tp=8", {}, "plan.tp"),                                   # 8 does not divide 12 heads
    (SMALL, 16, "pp=16", {}, "plan.pp"),                                  # 8 layers over 16 stages
    (SMALL, 8, "pp=2,vpp=5", {}, "plan.pp"),                              # 8 layers over 10 chunks
    (SMALL, 8, "dp=4,pp=2", {"global_batch": 6}, "plan.global_batch"),    # 6 % (4 x 1)
    (SMALL, 8, "dp=4,pp=2", {"global_batch": 8, "micro_batch": 4}, "plan.global_batch"),  # 8 % (4 x 4)
    (SMALL, 8, "ep=2", {}, "plan.ep"),                                    # dense model
    (SMALL, 8, "tp=2,pp=2,dp=3", {}, "plan"),                             # 12 != 8 GPUs
    (SMALL, 8, "tp=2,cp=3", {}, "plan"),                                  # tp*pp*cp does not divide 8
    (SMALL, 8, "cp=2,dp=4", {"seq_len": 1023}, "plan.cp"),                # cp does not divide the sequence
])
def test_bad_plans_raise_plan_error_naming_the_field(model, n, plan, kw, field) -> None:
    with pytest.raises(PlanError) as info:
        predict(model, gpu="h100-sxm", num_gpus=n, plan=plan, **{"seq_len": 1024, **kw})
    e = info.value
    assert e.field == field
    msg = str(e)
    assert "\n" not in msg and msg.startswith(field + ":") and e.fix


# ---- 8. Korthikanti et al. 2022: activations of a GPT layer ---------------------------------------------

K_S, K_B, K_H, K_A = 2048, 2, 1024, 16
_K_MODEL = ModelSpec(name="korthikanti", num_layers=2, hidden_size=K_H, num_heads=K_A, ffn_hidden_size=4 * K_H,
                     vocab_size=1024, max_seq_len=K_S, dropout=0.1)


def _k_bytes(tp: int, sp: bool, recompute: str, model: ModelSpec = _K_MODEL) -> float:
    plan = parse_plan("", tp=tp, sp=sp, micro_batch=K_B, attention_kernel="unfused", recompute=recompute)
    return layer_activation_bytes(layer_context(model, plan, K_S, get_framework("megatron")), False, recompute)


SBH = K_S * K_B * K_H
AS_H = K_A * K_S / K_H


@pytest.mark.parametrize("tp,sp,expected", [
    (1, False, SBH * 34),
    (4, True, SBH / 4 * 34),
    (4, False, SBH * (10 + 24 / 4)),
    (8, True, SBH / 8 * 34),
])
def test_korthikanti_selective(tp: int, sp: bool, expected: float) -> None:
    """Selective recomputation drops the 5as/h term: 34 sbh (/t with SP; 10 + 24/t without)."""
    assert _k_bytes(tp, sp, "selective") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tp,sp,expected", [(1, False, SBH * 2), (4, True, SBH * 2 / 4), (4, False, SBH * 2)])
def test_korthikanti_full(tp: int, sp: bool, expected: float) -> None:
    """Full recomputation keeps the layer input: 2 sbh (/t with SP)."""
    assert _k_bytes(tp, sp, "full") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tp,sp", [(1, False), (4, True), (4, False)])
def test_korthikanti_without_dropout(tp: int, sp: bool) -> None:
    """No dropout: the two sbh masks and the as^2b mask and dropout output go; the softmax output
    (2 as^2 b) stays: (32 sbh + 2 as^2 b) with the same tp/sp division."""
    model = _K_MODEL.model_copy(update={"dropout": 0.0})
    if sp or tp == 1:
        expected = SBH / tp * (32 + 2 * AS_H)
    else:
        expected = SBH * (8 + 24 / tp + 2 * AS_H / tp)
    assert _k_bytes(tp, sp, "none", model) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tp,sp,expected", [
    (1, False, SBH * (34 + 5 * AS_H)),
    (4, True, SBH / 4 * (34 + 5 * AS_H)),
    (4, False, SBH * (10 + 24 / 4 + 5 * AS_H / 4)),
])
def test_korthikanti_no_recompute(tp: int, sp: bool, expected: float) -> None:
    # observed at tp=1: sbh x 322 = sbh x (34 + 9 x 32); Korthikanti: sbh x (34 + 5 x 32) = sbh x 194
    assert _k_bytes(tp, sp, "none") == pytest.approx(expected, rel=1e-12)


# ---- 9. JSON contract -----------------------------------------------------------------------------------

def test_predict_json_has_the_documented_keys() -> None:
    r = predict(SMALL, gpu="h100-sxm", num_gpus=16, plan="tp=2,pp=2,sp=1,zero=1", global_batch=32, seq_len=2048)
    j = r.to_json()
    required = {"schema", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "breakdown_s",
                "memory_per_gpu_bytes", "fits", "inputs"}
    assert required <= set(j)
    assert j["schema"] == 1
    core = {"compute", "recompute", "tp_comm", "cp_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "other",
            "stragglers"}
    assert core <= set(j["breakdown_s"]) <= core | {"ep_comm", "moe_imbalance"}
    assert set(j["memory_per_gpu_bytes"]) == {"weights", "gradients", "optimizer", "activations", "other", "total"}
    assert j["memory_per_gpu_bytes"]["total"] == pytest.approx(
        sum(v for k, v in j["memory_per_gpu_bytes"].items() if k != "total"))
    assert sum(j["breakdown_s"].values()) == pytest.approx(j["step_time_s"], rel=1e-12)
    assert isinstance(j["fits"], bool)
    assert {"model", "cluster", "plan", "seq_len", "framework"} <= set(j["inputs"])
    assert j["inputs"]["plan"]["dp"] == 4 and j["inputs"]["plan"]["global_batch"] == 32
    # numbers agree with each other: tokens/s, TFLOP/s per GPU and MFU from the model FLOPs
    tokens = 32 * 2048
    assert j["tokens_per_s"] == pytest.approx(tokens / j["step_time_s"], rel=1e-12)
    flops = SMALL.flops_per_token(2048, causal=True) * tokens
    assert j["tflops_per_gpu"] == pytest.approx(flops / j["step_time_s"] / 16 / 1e12, rel=1e-12)
    assert j["mfu"] == pytest.approx(j["tflops_per_gpu"] * 1e12 / r.job.cluster.gpu.peak("bf16"), rel=1e-12)
    full = SMALL.flops_per_token(2048) * tokens
    assert j["mfu_full_attention"] == pytest.approx(full / j["step_time_s"] / 16 / r.job.cluster.gpu.peak("bf16"),
                                                    rel=1e-12)
    json.loads(json.dumps(j))  # plain JSON, no NaN or objects


# ---- framework semantics: op-level SAC, FlashAttention-2, FSDP under PP; power caps ---------------------

def _tt(framework: str, plan: str, gpu: str = "h100-sxm", n: int = 8, mb: int = 2, seq: int = 8192):
    return ct.predict("llama3-8b", gpu=gpu, num_gpus=n, plan=plan, micro_batch=mb, global_batch=mb * n, seq_len=seq,
                      framework=framework)


def test_torchtitan_selective_is_op_level_sac():
    from clustertwin.schedule.memory import layer_activation_bytes
    from clustertwin.workload.graph import recompute_mode
    from clustertwin.specs.framework import get_framework
    assert recompute_mode("selective", get_framework("torchtitan")) == "selective_ops"
    assert recompute_mode("selective", get_framework("megatron")) == "selective"
    assert recompute_mode("full", get_framework("torchtitan")) == "full"
    tt = _tt("torchtitan", "tp=1,zero=3,rc=selective")
    c = tt.graph.context
    T, h = c.tokens, c.hidden
    q, v = c.heads * c.qk_head_dim, c.kv_heads * c.v_head_dim
    # block input, wq and wv outputs, attention output + lse, w1 output, w2 output (bf16)
    expected = 2 * T * (h + q + v + q + c.ffn + h) + 4 * T * c.heads
    assert layer_activation_bytes(c, False, "selective_ops") == expected
    none = layer_activation_bytes(c, False, "none")
    assert layer_activation_bytes(c, False, "full") < expected < 0.6 * none
    # it repeats the wk, wo and w3 matmuls, norms and elementwise: more than the attention core alone
    names = {op.name for op in tt.graph.stages[0].blocks[1].recompute}
    assert {"attn.qkv", "attn.proj", "mlp.up", "norm1", "mlp.act"} <= names
    assert "mlp.down" not in names and not any(n.startswith("attn.flash") for n in names)
    none_plan = _tt("torchtitan", "tp=1,zero=3,rc=none")
    assert tt.memory.breakdown_bytes["activations"] < none_plan.memory.breakdown_bytes["activations"]
    assert tt.breakdown_s["recompute"] > 0


def test_flash2_is_slower_than_flash_on_hopper_only():
    f3 = _tt("torchtitan", "tp=1,zero=3,attention_kernel=flash")
    f2 = _tt("torchtitan", "tp=1,zero=3")
    assert f2.graph.plan.attention_kernel == "flash2"
    assert f2.step_time_s > f3.step_time_s
    assert f2.memory.total_bytes == f3.memory.total_bytes
    a3 = _tt("torchtitan", "tp=1,zero=3,attention_kernel=flash", gpu="a100-80gb", seq=4096)
    a2 = _tt("torchtitan", "tp=1,zero=3,attention_kernel=flash2", gpu="a100-80gb", seq=4096)
    assert a2.step_time_s == pytest.approx(a3.step_time_s)   # Ampere's best kernel is FlashAttention-2


def test_power_cap_lowers_the_tensor_clock_to_the_highest_that_fits():
    from clustertwin.catalog import load_gpu
    from clustertwin.cost import power as pw
    capped = load_gpu("h100-sxm-96gb")
    f = pw.clock(capped, "tensor")
    # P_static + (P_rated - P_static) f^3 = cap (cost/power.py): a GEMM at that clock draws the cap
    assert pw.power(capped, "tensor", f) == pytest.approx(500.0)
    assert f < 1.0 and pw.clock(capped, "memory") == 1.0          # memory-bound work fits under the cap
    assert pw.clock(load_gpu("h100-sxm"), "tensor") == 1.0
    assert pw.clock(capped.model_copy(update={"tdp_w": 800.0}), "tensor") == 1.0
    from clustertwin.cost.compute import ComputePricer
    from clustertwin.specs.framework import get_framework
    from clustertwin.calibrate.profile import profile_for
    from clustertwin.workload.transformer import gemm
    op = gemm("g", 8192, 8192, 8192, "bf16", 2)
    full = load_gpu("h100-sxm").model_copy(update={"hbm_bandwidth_bytes_per_s": capped.hbm_bandwidth_bytes_per_s,
                                                     "hbm_bytes": capped.hbm_bytes})
    t_cap = ComputePricer(capped, profile_for(capped), get_framework("megatron")).gemm_time(op)
    t_full = ComputePricer(full, profile_for(full), get_framework("megatron")).gemm_time(op)
    fixed = profile_for(full).gemm_fixed_s          # the kernel's fill and drain: not tensor-clock work
    assert t_cap - fixed == pytest.approx((t_full - fixed) / f)


def test_fsdp_under_pp_keeps_the_stage_gathered_in_torchtitan():
    tt = ct.predict("llama3-8b", gpu="h100", num_gpus=16, plan="tp=1,pp=2,zero=3", micro_batch=1, global_batch=16,
                    seq_len=4096, framework="torchtitan")
    # FSDP under PP that gathers per micro-batch: Megatron-FSDP (DeepSpeed refuses ZeRO-3 with PP)
    mg = ct.predict("llama3-8b", gpu="h100", num_gpus=16, plan="tp=1,pp=2,zero=3", micro_batch=1, global_batch=16,
                    seq_len=4096, framework="megatron")
    sg = tt.graph.stages[0]
    assert not sg.microbatch_dp_ops and any(op.name.startswith("fsdp.") for op in sg.step_ops)
    assert mg.graph.stages[0].microbatch_dp_ops
    stage_params = sg.params.dense + sg.params.embedding
    # unsharded fp32 gradient accumulation on top of the sharded gradients
    assert tt.memory.breakdown_bytes["gradients"] == pytest.approx(4 * stage_params / 8 + 4 * stage_params)
    no_pp = ct.predict("llama3-8b", gpu="h100", num_gpus=8, plan="tp=1,pp=1,zero=3", micro_batch=1, global_batch=8,
                       seq_len=4096, framework="torchtitan")
    assert no_pp.graph.stages[0].microbatch_dp_ops


def test_gradient_reduction_dtype_is_a_plan_choice_with_framework_defaults():
    kw = dict(gpu="h100", num_gpus=64, micro_batch=1, global_batch=64, seq_len=4096)
    mg = ct.predict("llama3-70b", plan="tp=8,pp=2", framework="megatron", **kw)
    nemo = ct.predict("llama3-70b", plan="tp=8,pp=2", framework="nemo", **kw)
    mg16 = ct.predict("llama3-70b", plan="tp=8,pp=2,grad_reduce_dtype=bf16", framework="megatron", **kw)
    assert mg.graph.plan.grad_reduce_dtype == "fp32" and nemo.graph.plan.grad_reduce_dtype == "bf16"
    assert mg16.memory.breakdown_bytes["gradients"] == pytest.approx(mg.memory.breakdown_bytes["gradients"] / 2)
    assert mg16.memory.breakdown_bytes["gradients"] == pytest.approx(nemo.memory.breakdown_bytes["gradients"])
    # half the bytes to reduce: the DP reduction is never slower
    assert mg16.breakdown_s["dp_comm"] <= mg.breakdown_s["dp_comm"]


def test_torchtitan_memory_never_grows_with_zero_under_pp():
    kw = dict(gpu="h100-sxm", num_gpus=32, micro_batch=1, global_batch=64, seq_len=2048, framework="torchtitan")
    # the ZeRO stages torchtitan runs under PP: 2 (FSDP2 reshard_after_forward=False) and 3 (no ZeRO-1,
    # and DDP only without PP)
    mem = [ct.predict("llama3-8b", plan=f"tp=1,pp=2,zero={z}", **kw).memory.total_bytes for z in (2, 3)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(mem, mem[1:])), mem
    # the unsharded accumulation is in the gradient reduction dtype
    f32 = ct.predict("llama3-8b", plan="tp=1,pp=2,zero=3", **kw)
    b16 = ct.predict("llama3-8b", plan="tp=1,pp=2,zero=3,grad_reduce_dtype=BF16", **kw)
    sg = f32.graph.stages[f32.memory.critical_stage]
    assert b16.memory.critical_stage == f32.memory.critical_stage
    stage = sg.params.dense + sg.params.embedding
    drop = f32.memory.breakdown_bytes["gradients"] - b16.memory.breakdown_bytes["gradients"]
    assert drop == pytest.approx(2 * stage)     # fp32 -> bf16 accumulation buffer; the fp32 shard stays


def test_torchtitan_selective_with_unfused_attention_keeps_megatron_semantics():
    kw = dict(gpu="h100-sxm", num_gpus=8, micro_batch=1, global_batch=8, seq_len=4096)
    tt = ct.predict("llama3-8b", plan="tp=1,zero=3,rc=selective,attention_kernel=unfused", framework="torchtitan", **kw)
    names = {op.name for op in tt.graph.stages[0].blocks[1].recompute}
    assert {"attn.qk", "attn.softmax", "attn.av"} <= names      # the s^2 scores are recomputed, not lost
    c = tt.graph.context
    assert tt.memory.breakdown_bytes["activations"] > 0
    from clustertwin.schedule.memory import layer_activation_bytes
    assert layer_activation_bytes(c, False, "selective_ops") == layer_activation_bytes(c, False, "selective")


def test_moe_experts_process_the_tokens_of_their_expert_tp_group():
    kw = dict(gpu="h100-sxm", num_gpus=48, global_batch=96, seq_len=4096, micro_batch=32)
    etp_tp = ct.predict("mixtral-8x7b", plan="tp=16,pp=1,sp=1,zero=1", **kw)
    assert etp_tp.mfu < 1.0
    c = etp_tp.graph.context
    assert (c.etp, c.tp) == (16, 16) and c.moe_tokens == c.tokens          # all tokens, 1/16 of each expert
    up = next(op for op, _ in etp_tp.graph.stages[0].ops(Phase.FWD) if op.name == "moe.expert.up")
    assert up.shape[0] * up.shape[1] == c.moe_tokens * c.top_k           # batch of experts x tokens each
    etp1 = ct.predict("mixtral-8x7b", plan="tp=16,pp=1,sp=1,zero=1,etp=1,ep=1", **kw)
    assert etp1.graph.context.moe_tokens == c.tokens // 16                # its own SP shard, whole experts


def test_expert_tp_wider_than_tp_gathers_more_shards():
    p = ct.predict("mixtral-8x7b", gpu="h100-sxm", num_gpus=16, plan="tp=2,etp=4,ep=2,sp=1", micro_batch=1,
                   global_batch=16, seq_len=4096)
    c = p.graph.context
    assert c.moe_tokens == 2 * c.tokens       # the SP shards (1/2 each) of 4 ranks
