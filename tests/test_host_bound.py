"""Small work: the host's issue time, kernel counts per framework, GEMM alignment, vocabulary padding
(issue 16, regime 2). Hand-checkable cases and invariants, no timing of this machine."""
from __future__ import annotations

import pytest

from clustertwin.constants import value
from clustertwin.cost.compute import ComputePricer, gemm_aligned, host_idle
from clustertwin.cost.profile import default_profile
from clustertwin.catalog import cluster_for_gpu
from clustertwin.specs.framework import get_framework
from clustertwin.workload.ops import Phase
from clustertwin.workload.transformer import LayerContext, _norm, gemm, gemm_backward, head_ops


def test_a_host_bound_stream_idles_by_the_host_excess_per_layer():
    # three ops, each 10 s of host and 1 s of GPU: in steady state the GPU waits 3 x (10 - 1) per run
    assert host_idle([(10.0, 1.0, True)] * 3) == pytest.approx(27.0)


def test_long_kernels_hide_the_host_time_of_the_small_ones():
    # the host issues the two small ops while the long one runs: no idle
    assert host_idle([(1.0, 100.0, True), (10.0, 1.0, True), (10.0, 1.0, True)]) == 0.0
    # off-stream ops (overlapped communication) cost host time but never hold the stream
    assert host_idle([(1.0, 5.0, True), (1.0, 50.0, False)]) == 0.0


def test_host_idle_never_shrinks_when_the_host_gets_slower():
    ops = [(2.0, 3.0, True), (4.0, 1.0, True), (1.0, 6.0, True)]
    slower = [(h * 2, g, s) for h, g, s in ops]
    assert host_idle(slower) >= host_idle(ops)


def test_unaligned_leading_dimensions_run_at_the_unaligned_efficiency():
    gpu = cluster_for_gpu("a100", 8).gpu
    pricer = ComputePricer(gpu, default_profile(gpu), get_framework("megatron"))
    aligned = gemm("head.logits", 8192, 50304, 2048, "fp16", 2)
    odd = gemm("head.logits", 8192, 50257, 2048, "fp16", 2)
    assert gemm_aligned(aligned) and not gemm_aligned(odd)
    per_flop = (pricer.time(odd) / odd.flops) / (pricer.time(aligned) / aligned.flops)
    assert per_flop == pytest.approx(1 / value("gemm.unaligned_efficiency"), rel=0.02)
    # a weight gradient reduces over the tokens: an odd token count is no misalignment
    _, wgrad = gemm_backward(gemm("mlp.up", 1001, 4096, 1024, "bf16", 2))
    assert gemm_aligned(wgrad)


def _ctx(**kw) -> LayerContext:
    base = dict(micro_batch=1, seq_len=1024, tokens=1024, hidden=1024, heads=16, kv_heads=16, qk_head_dim=64,
                v_head_dim=64, ffn=4096, tp=1, cp=1, sp=False, gated=False, norm="layernorm", rope=False, bias=True,
                dropout=True, attention_kernel="unfused", gemm_dtype="fp16", act_bytes=2, fused_bias_act=True,
                fused_residual=True, fused_rope=True)
    base.update(kw)
    return LayerContext(**base)


@pytest.mark.parametrize("tp,pad,rows", [(1, 128, 50304), (8, 128, 51200 // 8), (1, 1, 50257), (8, 1, 6283)])
def test_megatron_pads_the_vocabulary_to_128_times_tp(tp, pad, rows):
    fwd, _ = head_ops(_ctx(tp=tp, vocab_pad=pad), 50257, False)
    logits = next(op for op in fwd if op.name == "head.logits")
    assert logits.shape[2] == rows


def test_eager_norms_launch_more_kernels_and_move_more_bytes_than_fused():
    for norm in ("layernorm", "rmsnorm"):
        fused_f, fused_b = _norm(_ctx(norm=norm), "n", "layer")
        eager_f, eager_b = _norm(_ctx(norm=norm, fused_norm=False), "n", "layer")
        assert (fused_f.kernels, fused_b.kernels) == (1, 2)   # the weight-gradient reduction is a second pass
        assert eager_f.kernels > fused_f.kernels and eager_b.kernels > fused_b.kernels
        assert eager_f.bytes > fused_f.bytes and eager_b.bytes > fused_b.bytes
        assert fused_b.phase == Phase.BWD


def test_backward_kernels_cost_the_autograd_engine_not_python():
    gpu = cluster_for_gpu("h100-sxm", 8).gpu
    fw = get_framework("megatron")
    pricer = ComputePricer(gpu, default_profile(gpu), fw)
    f, b = _norm(_ctx(), "n", "layer")
    assert pricer.host_time(f) == pytest.approx(fw.cpu_dispatch_s)
    assert pricer.host_time(b) == pytest.approx(2 * fw.backward_dispatch_s)
