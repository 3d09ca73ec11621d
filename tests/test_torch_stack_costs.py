"""What torch's own distributed code runs under torchtitan (issue 16, items 2-4): the experimental ring
attention's passes per ring step, FSDP2's copy-out / copy-in on the compute stream, the foreach AdamW
and clip_grad_norm_ passes. Byte counts checked by hand from the constants' sources."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import clustertwin as ct
from clustertwin.catalog import cluster_for_gpu, load_model
from clustertwin.constants import value
from clustertwin.schedule.step import FIRST_STEP_CP, StageTime, accumulate_ops
from clustertwin.specs import make_job, make_plan
from clustertwin.specs.framework import get_framework
from clustertwin.workload.graph import build_graph, fsdp2_copy_bytes, layer_context, optimizer_traffic
from clustertwin.workload.ops import Op, OpKind, Phase
from clustertwin.workload.transformer import LAST_STEP_CP, layer_ops

MODEL = "llama3-8b"


def _ctx(framework: str, cp: int, seq: int = 65536):
    model = load_model(MODEL)
    plan = make_plan(tp=1, pp=1, dp=8 // cp, cp=cp, zero_stage=3, micro_batch=1, recompute="full")
    return model, layer_context(model, plan, seq, get_framework(framework))


def _by_name(ops):
    return {op.name: op for op in ops}


def test_torch_ring_merge_and_accumulation_bytes_per_step():
    model, c = _ctx("torchtitan-eager", 4)        # eager: nothing compiles the ring
    fwd, bwd, _ = layer_ops(c, False)
    f, b = _by_name(fwd), _by_name(bwd)
    heads, d = c.heads, model.qk_head_dim
    assert heads == model.num_heads                      # tp 1: every head on the rank
    out = c.tokens * heads * d
    kv = c.tokens * heads * 2 * d                        # K and V with the heads repeated (repeat_kv)
    merge = out * (value("cp.torch_forward_once_bytes_per_output_element")
                   + value("cp.torch_merge_bytes_per_output_element") * 3) \
        + kv * value("cp.torch_kv_contiguous_bytes_per_element") \
        + kv * value("cp.torch_forward_kv_concat_bytes_per_element") * 3   # send buffer built on steps 0..cp-2
    assert f["attn.cp_merge"].bytes == pytest.approx(merge)
    assert f["attn.cp_merge"].kernels == 2 + (int(value("cp.torch_merge_kernels_per_step")) + 1) * 3
    acc = (out * value("cp.torch_grad_accum_q_bytes_per_element")
           + kv * value("cp.torch_grad_accum_kv_bytes_per_element")) * 4 \
        + (out + kv) * value("cp.torch_grad_once_bytes_per_element") + kv * value("cp.torch_kv_contiguous_bytes_per_element")
    assert b["attn.cp_grad_accum"].bytes == pytest.approx(acc)
    # K/V all-gathered in 16 bits (the whole group's), dK/dV passed in fp32 every step, the last apart
    assert f[FIRST_STEP_CP].comm_bytes == pytest.approx(kv * 2 * 4)
    assert b["attn.cp_grad_exchange"].comm_bytes == pytest.approx(kv * 4 * 3)
    assert b[LAST_STEP_CP].comm_bytes == pytest.approx(kv * 4)


def test_compiled_torch_ring_passes_are_inductors_fused_kernels():
    """torchtitan-compile traces the ring into the block's graph: one fused merge reading each step's
    16-bit block output once and writing the output once, one send-buffer concatenation, per-step dK/dV
    send buffers written in one kernel, the steps' dQ summed after the loop (constants cp.compiled_*)."""
    model, c = _ctx("torchtitan-compile", 4)
    assert c.cp_ring_compiled and not _ctx("torchtitan-eager", 4)[1].cp_ring_compiled
    fwd, bwd, _ = layer_ops(c, False)
    f, b = _by_name(fwd), _by_name(bwd)
    out = c.tokens * c.heads * model.qk_head_dim
    kv = 2 * out
    once_kv = value("cp.torch_kv_contiguous_bytes_per_element") + value("cp.torch_forward_kv_concat_bytes_per_element")
    merge = out * (value("cp.compiled_merge_read_bytes_per_output_element") * 4
                   + value("cp.compiled_merge_write_bytes_per_output_element")) + kv * once_kv
    assert f["attn.cp_merge"].bytes == pytest.approx(merge)
    assert f["attn.cp_merge"].kernels == 2 + int(value("cp.compiled_forward_kernels_per_step")) * 3
    assert b["attn.cp_grad_accum"].kernels == 3 + 4
    acc = out * (value("cp.compiled_grad_q_read_bytes_per_element") * 4
                 + value("cp.compiled_merge_write_bytes_per_output_element")) \
        + kv * (value("cp.compiled_grad_kv_first_bytes_per_element") + value("cp.compiled_grad_kv_bytes_per_element") * 3
                + value("cp.compiled_grad_kv_final_bytes_per_element") + once_kv)
    assert b["attn.cp_grad_accum"].bytes == pytest.approx(acc)
    # the exchanges are the same collectives as eager; the fused passes move fewer bytes, the more so per step
    _, e = _ctx("torchtitan-eager", 4)
    fe, be = _by_name(layer_ops(e, False)[0]), _by_name(layer_ops(e, False)[1])
    assert b["attn.cp_grad_exchange"].comm_bytes == be["attn.cp_grad_exchange"].comm_bytes
    assert f["attn.cp_merge"].bytes < fe["attn.cp_merge"].bytes
    assert b["attn.cp_grad_accum"].bytes < be["attn.cp_grad_accum"].bytes


def test_ring_passes_only_on_the_torch_ring_and_only_with_cp():
    _, c1 = _ctx("torchtitan-compile", 1, 8192)
    assert not [op for op in layer_ops(c1, False)[0] if op.name.startswith("attn.cp")]
    _, cm = _ctx("megatron", 4)
    names = {op.name for op in layer_ops(cm, False)[0] + layer_ops(cm, False)[1]}
    assert "attn.cp_merge" not in names and "attn.cp_ring" in names


def test_op_level_sac_does_not_repeat_the_ring_merges():
    _, c = _ctx("torchtitan-compile", 4)
    from clustertwin.workload.transformer import op_sac_recompute
    assert not [op for op in op_sac_recompute(c, tuple(layer_ops(c, False)[0])) if op.name.startswith("attn.cp")]


def test_foreach_adamw_and_clip_bytes():
    shard, fused = optimizer_traffic(8e9, 0.0, 8, 1, 3, 2)
    shard_f, foreach = optimizer_traffic(8e9, 0.0, 8, 1, 3, 2, foreach=True)
    assert shard == shard_f == 1e9
    assert foreach == pytest.approx(1e9 * (80 + 12))
    assert foreach > fused


def test_fsdp2_copy_bytes_by_hand():
    # two gathers' copy-out (read + write 2 bytes) and the copy-in reading bf16 and writing fp32
    assert fsdp2_copy_bytes(1e9, 2, 4) == pytest.approx(1e9 * (2 * 4 + 2 + 4))
    assert fsdp2_copy_bytes(1e9, 2, 4, gathers=1) == pytest.approx(1e9 * (4 + 2 + 4))


def _job(framework: str, cp: int = 1, seq: int = 8192, dp: int = 8, global_batch: int | None = None):
    model = load_model(MODEL)
    cluster = cluster_for_gpu("h100-sxm", dp * cp)
    plan = make_plan(tp=1, pp=1, dp=dp, cp=cp, zero_stage=3, micro_batch=1, recompute="full",
                     global_batch=global_batch)
    return make_job(model, cluster, plan, seq, framework)


def test_fsdp2_copies_are_paid_per_micro_batch_on_the_compute_stream():
    job = _job("torchtitan-compile")
    p = ct.predict_job(job)
    g = build_graph(job)
    params = sum(s.params.total for s in g.stages)
    gpu = job.cluster.gpu
    per_mb = fsdp2_copy_bytes(params, 2, 4) / gpu.hbm_bandwidth_bytes_per_s   # at full HBM bandwidth: a floor
    # never hidden: the DP/FSDP share of the step holds at least the copies of every micro-batch
    assert p.breakdown_s["dp_comm"] >= g.num_microbatches * per_mb
    assert sum(p.breakdown_s.values()) == pytest.approx(p.step_time_s)


def test_megatron_prices_no_fsdp2_copies():
    job = _job("megatron")
    assert not get_framework("megatron").fsdp2_copies
    p = ct.predict_job(job)
    assert sum(p.breakdown_s.values()) == pytest.approx(p.step_time_s)


class _Compute:
    tp_overlap_chunks = 1

    def __init__(self, chunks):
        self.attention_chunks = chunks

    def host_time(self, op):
        return 0.0


def _pricer(times: dict, chunks: int):
    return SimpleNamespace(time=lambda op: times[op.name], compute=_Compute(chunks))


def _comm(name, phase=Phase.FWD):
    return Op(name, OpKind.COLLECTIVE, phase, collective="all_gather", group="cp", comm_bytes=1.0,
              overlappable=True, layer="layer")


def test_first_step_all_gather_hides_behind_one_ring_step_only():
    attn = Op("attn.flash2", OpKind.ATTENTION, Phase.FWD, flops=1.0, bytes=1.0, layer="layer")
    ops = [(_comm(FIRST_STEP_CP), 1), (attn, 1)]
    st = StageTime(0)
    cp, hide = accumulate_ops(st, ops, Phase.FWD, _pricer({FIRST_STEP_CP: 0.010, "attn.flash2": 0.008}, 4))
    # the first of 4 steps runs 2 ms of attention: 8 ms of the 10 ms gather the compute stream waits for
    assert st.fwd_s == pytest.approx(0.008 + 0.008)
    assert cp == pytest.approx(0.002)
    st2 = StageTime(0)
    cp2, _ = accumulate_ops(st2, ops, Phase.FWD, _pricer({FIRST_STEP_CP: 0.001, "attn.flash2": 0.008}, 4))
    assert st2.fwd_s == pytest.approx(0.008) and cp2 == pytest.approx(0.001)   # fully hidden


def test_last_ring_exchange_is_waited_for():
    attn = Op("attn.flash2.bwd", OpKind.ATTENTION, Phase.BWD, flops=1.0, bytes=1.0, layer="layer")
    st = StageTime(0)
    cp, _ = accumulate_ops(st, [(attn, 1), (_comm(LAST_STEP_CP, Phase.BWD), 1)], Phase.BWD,
                           _pricer({LAST_STEP_CP: 0.003, "attn.flash2.bwd": 0.02}, 4))
    assert st.bwd_s == pytest.approx(0.023) and cp == 0.0


def test_ring_cost_grows_with_the_ring_but_never_beats_cp1_per_token():
    """One sequence per step, 16K tokens per rank: a longer sequence over more CP ranks never takes less time."""
    t = [ct.predict_job(_job("torchtitan-compile", cp=cp, seq=16384 * cp, dp=1, global_batch=1)).step_time_s
         for cp in (1, 2, 4, 8)]
    assert t == sorted(t)


def _attention_ops(framework: str):
    model = load_model(MODEL)
    plan = make_plan(tp=1, pp=1, dp=8, cp=1, zero_stage=3, micro_batch=1, recompute="full",
                     attention_kernel="flash2")       # torchtitan's kernel (FrameworkProfile.attention_kernel)
    c = layer_context(model, plan, 32768, get_framework(framework))
    fwd, bwd, _ = layer_ops(c, False)
    return ([op for op in fwd if op.kind == OpKind.ATTENTION][0], [op for op in bwd if op.kind == OpKind.ATTENTION][0])


def _compute_pricer(framework: str):
    from clustertwin.cost.compute import ComputePricer
    from clustertwin.cost.profile import default_profile
    gpu = cluster_for_gpu("h100-sxm", 8).gpu
    return ComputePricer(gpu, default_profile(gpu), get_framework(framework))


def test_torch_sdpa_runs_flash_attention_2_at_pytorchs_measured_speed():
    """torchtitan calls torch SDPA, whose flash backend is PyTorch's build of FlashAttention-2: its
    attention time is the FA2 time over the measured factors, forward and backward; megatron-style stacks
    (no SDPA) keep the FA2 figures as they are."""
    fwd, bwd = _attention_ops("torchtitan-compile")
    assert fwd.name.startswith("attn.flash2") and bwd.name.startswith("attn.flash2")
    sdpa = _compute_pricer("torchtitan-compile")
    plain = _compute_pricer("megatron")
    assert get_framework("torchtitan-compile").attention_sdpa and not get_framework("megatron").attention_sdpa
    gap = sdpa.fw.kernel_gap_s * fwd.kernels
    gap_plain = plain.fw.kernel_gap_s * fwd.kernels
    f_factor = value("attention.torch_sdpa_flash_forward_factor")
    b_factor = value("attention.torch_sdpa_flash_backward_factor")
    assert 0 < b_factor < f_factor < 1                    # SDPA's flash lags more in backward (0.817 vs 0.842)
    assert sdpa.time(fwd) - gap == pytest.approx((plain.time(fwd) - gap_plain) / f_factor, rel=1e-9)
    assert sdpa.time(bwd) - gap == pytest.approx((plain.time(bwd) - gap_plain) / b_factor, rel=1e-9)


def test_torch_sdpa_factor_is_the_same_in_the_array_compute_pricer():
    import numpy as np
    fwd, bwd = _attention_ops("torchtitan-compile")
    sdpa = _compute_pricer("torchtitan-compile")
    for op in (fwd, bwd):
        assert float(np.asarray(sdpa.times(op))) == pytest.approx(sdpa.time(op), rel=1e-9)
