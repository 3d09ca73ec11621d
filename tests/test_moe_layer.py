"""What a dropless MoE layer runs besides its expert FLOPs (issue 16, fine-grained experts): per-expert
GEMMs on Transformer Engine's streams, the host's wait for the token counts, permutation 2 of the
all-to-all dispatcher, FP8 padding, the router's small kernels."""
from __future__ import annotations

from dataclasses import replace

import pytest

import clustertwin as ct
from clustertwin.constants import value
from clustertwin.cost.compute import ComputePricer, fill_batch, host_idle
from clustertwin.cost.profile import default_profile
from clustertwin.specs.framework import get_framework
from clustertwin.catalog import cluster_for_gpu
from clustertwin.workload.transformer import gemm, layer_ops
from clustertwin.workload.ops import Phase
from layer_contexts import qwen3_moe_ctx as _ctx

STREAMS = int(value("moe.grouped_gemm_streams"))


def _names(ops) -> list[str]:
    return [op.name for op in ops]


def test_alltoall_layer_sorts_by_local_expert_each_way_and_waits_for_the_counts():
    c = _ctx()
    fwd, bwd, _ = layer_ops(c, True)
    f, b = _names(fwd), _names(bwd)
    routed_bytes = 4096 * 8 * 2048 * 2 * 2          # token copies x hidden x (read + write) x bf16
    for name in ("moe.sort_chunks", "moe.unsort_chunks"):
        assert next(op for op in fwd if op.name == name).bytes == routed_bytes
        assert name + ".bwd" in b
    # order: counts gathered, host waits, then the all-to-all; sort after it, unsort before the combine
    assert f.index("moe.token_counts") < f.index("moe.dtoh_sync") < f.index("moe.dispatch") < f.index("moe.sort_chunks")
    assert f.index("moe.unsort_chunks") < f.index("moe.combine")
    sync = next(op for op in fwd if op.name == "moe.dtoh_sync")
    assert sync.extra["host_sync"] and sync.phase == Phase.FWD
    assert not any(op.extra.get("host_sync") for op in bwd)       # backward reuses the forward's splits
    topk = next(op for op in fwd if op.name == "moe.topk")
    assert topk.kernels == int(value("moe.router_kernels_forward"))


def test_deepep_and_single_expert_ranks_skip_permutation_two():
    for c in (_ctx(moe_dispatcher="deepep"), _ctx(experts_local=1, ep=128), _ctx(ep=1, experts_local=128)):
        fwd, bwd, _ = layer_ops(c, True)
        assert not any("sort_chunks" in n for n in _names(fwd) + _names(bwd))
        assert "moe.dtoh_sync" in _names(fwd)          # every dropless grouped GEMM needs host token counts
    assert "moe.token_counts" not in _names(layer_ops(_ctx(ep=1, experts_local=128), True)[0])


def test_fp8_experts_pad_and_unpad_their_tokens():
    fwd, bwd, _ = layer_ops(_ctx(gemm_dtype="fp8"), True)
    f, b = _names(fwd), _names(bwd)
    assert f.index("moe.expert.fp8_pad") < f.index("moe.expert.up") < f.index("moe.expert.down") < f.index(
        "moe.expert.fp8_unpad")
    assert "moe.expert.fp8_pad.bwd" in b and "moe.expert.fp8_unpad.bwd" in b
    pad = next(op for op in fwd if op.name == "moe.expert.fp8_pad")
    assert pad.bytes == 4096 * 8 * 2048 * 2 * 2
    assert "moe.expert.fp8_pad" not in _names(layer_ops(_ctx(), True)[0])                       # bf16
    assert "moe.expert.fp8_pad" not in _names(layer_ops(_ctx(gemm_dtype="fp8", moe_dispatcher="deepep"), True)[0])


def _pricer(gpu="h100-sxm") -> ComputePricer:
    cluster = cluster_for_gpu(gpu, 8)
    return ComputePricer(cluster.gpu, default_profile(cluster.gpu), get_framework("megatron"))


def test_expert_gemms_fill_the_gpu_four_at_a_time():
    pricer = _pricer()
    e16 = gemm("moe.expert.up", 2048, 1536, 2048, "bf16", 2, batch=16)
    e4 = gemm("moe.expert.up", 2048, 1536, 2048, "bf16", 2, batch=STREAMS)
    batched = gemm("attn.batched", 2048, 1536, 2048, "bf16", 2, batch=16)   # one launch of 16 (not experts)
    assert fill_batch(e16) == STREAMS and fill_batch(batched) == 16 and fill_batch(
        gemm("moe.expert.up", 8, 8, 8, "bf16", 2, batch=2)) == 2
    gap = get_framework("megatron").kernel_gap_s
    # 16 experts on 4 streams take four rounds of 4 (hand-checkable), never less than one packed launch
    assert pricer.time(e16) - gap == pytest.approx((16 / STREAMS) * (pricer.time(e4) - gap), rel=1e-12)
    assert pricer.time(e16) >= pricer.time(batched)


def test_expert_gemm_host_time_is_one_python_call_and_a_launch_per_expert():
    pricer = _pricer()
    fw = get_framework("megatron")
    e16 = gemm("moe.expert.up", 2048, 1536, 2048, "bf16", 2, batch=16)
    assert pricer.host_time(e16) == pytest.approx(fw.cpu_dispatch_s + 16 * value("moe.expert_gemm_launch_host_s"))
    dgrad = replace(e16, name="moe.expert.up.dgrad", phase=Phase.BWD)
    assert pricer.host_time(dgrad) == pytest.approx(fw.backward_dispatch_s + 16 * value("moe.expert_gemm_launch_host_s"))


def test_host_sync_exposes_the_issue_time_after_it():
    # (host s, GPU s, on the compute stream[, host waits for the GPU]) by hand: a long kernel, the
    # read-back (host 1 s), a short kernel issued in 2 s. Without the wait the host's lead hides both;
    # with it the GPU idles while the host reads back and issues the next kernel: 1 + 2 s per run
    free = [(0.0, 10.0, True), (1.0, 0.0, True), (2.0, 1.0, True)]
    synced = [(0.0, 10.0, True), (1.0, 0.0, True, True), (2.0, 1.0, True)]
    assert host_idle(free) == 0.0
    assert host_idle(synced) == pytest.approx(3.0)


def _qwen(dispatcher: str, precision: str = "bf16"):
    return ct.predict("qwen3-30b-a3b", gpu="h100", num_gpus=16,
                      plan=f"tp=1,pp=2,vpp=12,ep=8,dispatcher={dispatcher}", precision=precision,
                      micro_batch=1, global_batch=256, seq_len=4096)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_fine_grained_moe_breakdown_sums_and_mfu_below_one(precision):
    for dispatcher in ("alltoall", "deepep"):
        r = _qwen(dispatcher, precision)
        assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-12)
        assert 0 < r.mfu < 1
    # within one node DeepEP moves the same bytes; the all-to-all dispatcher's extra permutations cost
    assert _qwen("alltoall", precision).step_time_s > _qwen("deepep", precision).step_time_s


def test_slower_host_read_back_never_faster(monkeypatch):
    import clustertwin.cost.compute as compute

    base = _qwen("alltoall").step_time_s
    monkeypatch.setattr(compute, "_DTOH_SYNC", 10 * compute._DTOH_SYNC)
    from clustertwin.workload import transformer
    transformer.layer_ops.cache_clear()
    assert _qwen("alltoall").step_time_s >= base


def test_fp8_expert_casts_pay_a_quantize_launch_per_expert():
    # TE v2.9 split_quantize: one Python call, then one quantize per expert (not fused but for delayed scaling)
    pricer = _pricer()
    fw = get_framework("megatron")
    fwd, bwd, _ = layer_ops(_ctx(gemm_dtype="fp8"), True)
    for op in fwd + bwd:
        if op.name.startswith("moe.expert.") and op.name.endswith(".fp8_cast"):
            per_kernel = fw.backward_dispatch_s if op.phase == Phase.BWD else fw.cpu_dispatch_s
            assert pricer.host_time(op) == pytest.approx(per_kernel + 16 * value("moe.expert_quantize_launch_host_s"))
    # a dense layer's cast stays one kernel's dispatch
    dense = next(op for op in layer_ops(_ctx(gemm_dtype="fp8"), False)[0] if op.name.endswith(".fp8_cast"))
    assert pricer.host_time(dense) == pytest.approx(fw.cpu_dispatch_s * dense.kernels)


def test_grouped_linear_python_loops_cost_per_expert_where_te_runs_them():
    pricer = _pricer()
    fw = get_framework("megatron")
    launch, py = value("moe.expert_gemm_launch_host_s"), value("moe.expert_python_host_s")
    fp8 = gemm("moe.expert.up", 2048, 1536, 2048, "fp8", 2, batch=16)
    assert pricer.host_time(fp8) == pytest.approx(fw.cpu_dispatch_s + 16 * (launch + py))        # weight workspaces
    wgrad = replace(gemm("moe.expert.up", 2048, 1536, 2048, "bf16", 2, batch=16), name="moe.expert.up.wgrad",
                    phase=Phase.BWD)
    hook = value("moe.expert_grad_hook_host_s")   # AccumulateGrad + Megatron DDP hook per expert weight
    assert pricer.host_time(wgrad) == pytest.approx(fw.backward_dispatch_s + 16 * (launch + py + hook))
    # a data-gradient GEMM returns no weight gradient: no per-expert hook
    dgrad = replace(wgrad, name="moe.expert.up.dgrad")
    assert pricer.host_time(dgrad) == pytest.approx(fw.backward_dispatch_s + 16 * launch)
    # more local experts never take the host less time
    assert pricer.host_time(gemm("moe.expert.up", 1024, 1536, 2048, "fp8", 2, batch=32)) > pricer.host_time(fp8)


# DeepGEMM README at its first release (deepseek-ai/DeepGEMM a6d97a1, 2025-02-25), "Grouped GEMMs for MoE
# models (contiguous layout)", FP8 with 1x128/128x128 scaling on H800: (groups, M per group, N, K) -> TFLOPS.
# The best published kernel for DeepSeek-V3's expert shapes: the model must not price them faster.
_DEEPGEMM_CONTIGUOUS = {(4, 8192, 4096, 7168): 1297e12, (4, 8192, 7168, 2048): 1099e12,
                        (8, 4096, 4096, 7168): 1288e12, (8, 4096, 7168, 2048): 1093e12}


@pytest.mark.parametrize("shape", sorted(_DEEPGEMM_CONTIGUOUS))
def test_fp8_expert_gemms_not_faster_than_deepgemm(shape):
    cluster = cluster_for_gpu("h800", 8)
    pricer = ComputePricer(cluster.gpu, default_profile(cluster.gpu), get_framework("hai-llm"))
    groups, m, n, k = shape
    op = gemm("moe.expert.up", m, n, k, "fp8", 2, batch=groups)
    assert op.flops / pricer.time(op) <= _DEEPGEMM_CONTIGUOUS[shape]


def test_alltoall_dispatcher_sends_the_probabilities_in_their_own_all_to_all():
    # Megatron-Core MoEAlltoAllTokenDispatcher.token_dispatch: global_probs = all_to_all(...) after the tokens'
    # all-to-all, one value per routed copy; its gradient returns in the backward. DeepEP carries them inside.
    c = _ctx()
    fwd, bwd, _ = layer_ops(c, True)
    probs = [op for op in fwd if op.name == "moe.dispatch_probs"]
    assert len(probs) == 1 and probs[0].collective == "all_to_all" and probs[0].group == "ep"
    assert probs[0].comm_bytes == pytest.approx(c.moe_tokens * c.top_k * c.act_bytes)
    tokens = next(op for op in fwd if op.name == "moe.dispatch")
    assert probs[0].comm_bytes * c.hidden == pytest.approx(tokens.comm_bytes)
    assert [op.name for op in bwd].count("moe.dispatch_probs.bwd") == 1
    deep_f, deep_b, _ = layer_ops(replace(c, moe_dispatcher="deepep"), True)
    assert not [op for op in deep_f + deep_b if op.name.startswith("moe.dispatch_probs")]
