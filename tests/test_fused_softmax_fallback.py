"""Megatron's fused attention softmax runs only when micro-batch x heads per rank is a multiple of 4
(FusedScaleMaskSoftmax.is_kernel_available); otherwise the softmax runs as PyTorch ops in fp32."""
from __future__ import annotations

import pytest

from clustertwin.constants import value
from clustertwin.workload.transformer import LayerContext, layer_ops, stack_key, torch_softmax


def _ctx(**kw) -> LayerContext:
    base = dict(micro_batch=1, seq_len=1024, tokens=1024, hidden=1024, heads=2, kv_heads=2, qk_head_dim=64,
                v_head_dim=64, ffn=512, tp=8, cp=1, sp=False, gated=False, norm="layernorm", rope=False, bias=True,
                dropout=True, attention_kernel="unfused", gemm_dtype="fp16", act_bytes=2, fused_bias_act=True,
                fused_residual=True, fused_rope=True)
    base.update(kw)
    base["tokens"] = base["micro_batch"] * base["seq_len"]
    return LayerContext(**base)


def _softmax(c: LayerContext):
    fwd, bwd, _ = layer_ops(c, False)
    return (next(op for op in fwd if op.name == "attn.softmax"), next(op for op in bwd if op.name == "attn.softmax.bwd"))


@pytest.mark.parametrize("mb,heads,fused", [(1, 2, False), (2, 2, True), (1, 4, True), (3, 2, False), (1, 6, False),
                                            (2, 6, True), (8, 6, True)])
def test_fused_kernel_only_when_batches_times_heads_is_a_multiple_of_4(mb, heads, fused):
    assert value("attention.fused_softmax_batch_multiple") == 4
    c = _ctx(micro_batch=mb, heads=heads, kv_heads=heads)
    assert bool(torch_softmax(c)) is (not fused)
    f, b = _softmax(c)
    scores = mb * heads * c.seq_len * c.seq_len
    if fused:   # read fp16 scores, write fp16 probabilities; backward reads two, writes one
        assert (f.kernels, f.bytes, b.kernels, b.bytes) == (1, 4 * scores, 1, 6 * scores)
    else:       # float(), * scale, masked_fill_, softmax, cast back: (a + 4) + 8 + 9 + 8 + (4 + a) bytes
        assert (f.kernels, f.bytes, b.kernels, b.bytes) == (5, 37 * scores, 5, 37 * scores)
        assert f.flops == b.flops == 5.0 * scores


def test_flash_attention_has_no_such_fallback():
    c = _ctx(attention_kernel="flash")
    assert not torch_softmax(c)
    fwd, _, _ = layer_ops(c, False)
    assert not any(op.name == "attn.softmax" for op in fwd)


def test_fallback_is_its_own_stack_class_and_never_cheaper():
    """Contexts that take the fallback and those that do not never stack together (the builders branch on
    it), and the fallback moves more bytes in more kernels per score than the fused kernel."""
    fallback, fused = _ctx(micro_batch=1), _ctx(micro_batch=2)
    assert stack_key(fallback) != stack_key(fused)
    (f1, b1), (f2, b2) = _softmax(fallback), _softmax(fused)
    per_score = lambda op, c: op.bytes / (c.micro_batch * c.heads * c.seq_len ** 2)  # noqa: E731
    assert per_score(f1, fallback) > per_score(f2, fused) and per_score(b1, fallback) > per_score(b2, fused)
    assert f1.kernels > f2.kernels and b1.kernels > b2.kernels


def test_vtrain_tp8_micro_batch_1_prices_the_fallback():
    """vTrain's tp=8 runs of 16 heads at micro-batch 1 have 2 heads per rank: the PyTorch softmax."""
    from clustertwin.predict import predict_job
    from clustertwin.validate.runs import job_from_row, read_runs

    rows = {r.run_id: r for r in read_runs("data/validation/vtrain_single_node.csv")}
    row = next(r for r in rows.values() if r.raw["tp"] == "8" and r.raw["micro_batch"] == "1")
    pred = predict_job(job_from_row(row))
    layer = next(b for b in pred.graph.stages[0].blocks if b.name == "layer")
    softmax = next(op for op in layer.fwd if op.name == "attn.softmax")
    assert softmax.kernels == 5
