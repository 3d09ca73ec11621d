"""Memory as the frameworks hold it (issue 16, item 6): the loss peak by the loss a framework runs,
DTensor sequence parallelism keeping the gathered GEMM inputs, eager PyTorch's fp32 saves, and the
CUDA caching allocator's rounding rules. Hand-checkable cases; figures from constants.py."""
from __future__ import annotations

import numpy as np
import pytest

from clustertwin.constants import value
from clustertwin.schedule.memory import (allocator_block_bytes, allocator_segment_bytes, cp_ring_transient_bytes,
                                         layer_activation_bytes, loss_bytes_per_logit, reserved_bytes, stage_memory)
from clustertwin.specs.framework import get_framework
from clustertwin.workload.transformer import LayerContext

MiB = 1 << 20


def _llama_ctx(**kw) -> LayerContext:
    """A Llama-style layer (RMSNorm, RoPE, SwiGLU, GQA, flash attention, no dropout) on one rank."""
    base = dict(micro_batch=1, seq_len=4096, tokens=4096, hidden=4096, heads=32, kv_heads=8, qk_head_dim=128,
                v_head_dim=128, ffn=14336, tp=1, cp=1, sp=False, gated=True, norm="rmsnorm", rope=True, bias=False,
                dropout=False, attention_kernel="flash2", gemm_dtype="bf16", act_bytes=2, fused_bias_act=True,
                fused_residual=True, fused_rope=True)
    base.update(kw)
    return LayerContext(**base)


# ---- the loss ---------------------------------------------------------------------------------------
def test_loss_bytes_per_logit_follow_the_loss_the_framework_runs() -> None:
    titan = get_framework("torchtitan-compile")
    assert loss_bytes_per_logit(titan, 1) == 12          # F.cross_entropy on .float() logits
    assert loss_bytes_per_logit(titan, 8) == 16          # DTensor loss_parallel
    assert list(loss_bytes_per_logit(titan, np.array([1, 2, 8]))) == [12, 16, 16]
    assert loss_bytes_per_logit(get_framework("megatron"), 8) == 8          # fp32 softmax + fp32 gradient
    assert loss_bytes_per_logit(get_framework("pytorch-compile"), 1) == 2   # fused loss


def test_the_last_stage_holds_the_loss_peak_of_one_micro_batch() -> None:
    """Only the loss differs between two frameworks otherwise alike: the difference is logits x bytes."""
    kw = dict(dense=1e9, expert=0.0, dp_cp=8, edp=8, layers_dense=4, layers_moe=0, act_dense=1e8, act_moe=0.0,
              act_full_layer=0.0, in_flight_layers=4)
    fw = get_framework("torchtitan-compile")
    logits = 4096 * 128256
    without = stage_memory(fw, "bf16", 3, **kw)
    one = stage_memory(fw, "bf16", 3, logits=logits, tp=1, **kw)
    tp = stage_memory(fw, "bf16", 3, logits=logits, tp=8, **kw)
    held = value("memory.allocator_overhead")
    assert one["activations"] - without["activations"] == pytest.approx(12 * logits)
    assert tp["activations"] - without["activations"] == pytest.approx(16 * logits)
    assert one["other"] - without["other"] == pytest.approx(held * 12 * logits)


# ---- gradients ------------------------------------------------------------------------------------
def test_chunk_wise_gradient_reduction_keeps_two_chunks_unsharded() -> None:
    """A stack that reduce-scatters each pipeline chunk's gradient once its contiguous micro-batches have
    run their backward (meta-llama3, Llama 3 paper Sec. 3.3.2) holds the FP32 shard over DP plus two of
    the vpp chunks' FP32 gradients; Megatron-Core under ZeRO-2 with accumulation holds the whole stage's.
    Without interleaving the chunk is the stage, and so is the buffer."""
    kw = dict(dense=1e9, expert=0.0, dp_cp=128, edp=128, layers_dense=8, layers_moe=0, act_dense=1e8,
              act_moe=0.0, act_full_layer=0.0, in_flight_layers=8, microbatches=16)
    meta, mcore = get_framework("meta-llama3"), get_framework("megatron")
    assert stage_memory(meta, "bf16", 2, vpp=8, **kw)["gradients"] == pytest.approx(4 * 1e9 * (1 / 128 + 2 / 8))
    assert stage_memory(mcore, "bf16", 2, vpp=8, **kw)["gradients"] == pytest.approx(4 * 1e9)
    assert stage_memory(meta, "bf16", 2, vpp=1, **kw)["gradients"] == pytest.approx(4 * 1e9)
    assert stage_memory(meta, "bf16", 1, vpp=8, **kw)["gradients"] == pytest.approx(4 * 1e9)   # ZeRO-1: unsharded
    # more chunks never hold more unsharded gradient
    held = [stage_memory(meta, "bf16", 2, vpp=v, **kw)["gradients"] for v in (2, 4, 8)]
    assert held == sorted(held, reverse=True)


# ---- activations -----------------------------------------------------------------------------------
def test_dtensor_sequence_parallelism_keeps_the_gathered_gemm_inputs() -> None:
    """Megatron keeps the T/tp-row norm outputs and re-gathers them in backward; DTensor keeps the
    gathered T rows its column-parallel GEMMs (QKV, MLP up) saw: 2 x (T - T/tp) x h x 2 bytes more."""
    c = _llama_ctx(tp=8, sp=True, heads=4, kv_heads=1, ffn=14336 // 8)
    gathered = _llama_ctx(tp=8, sp=True, heads=4, kv_heads=1, ffn=14336 // 8, sp_keeps_gathered=True)
    T, h = 4096, 4096
    extra = layer_activation_bytes(gathered) - layer_activation_bytes(c)
    assert extra == 2 * (T - T // 8) * h * 2
    # what the recomputed layers keep (their input) does not change
    assert layer_activation_bytes(gathered, recompute="full") == layer_activation_bytes(c, recompute="full")
    # without sp nothing is gathered: the flag changes nothing
    assert layer_activation_bytes(_llama_ctx(sp_keeps_gathered=True)) == layer_activation_bytes(_llama_ctx())


def test_eager_pytorch_saves_its_fp32_intermediates() -> None:
    """Composite RMSNorm keeps x.float() (+4 bytes per element, two norms), complex RoPE keeps fp32 q
    and k, eager SwiGLU keeps silu's output too."""
    T, h = 4096, 4096
    fused = _llama_ctx()
    eager = _llama_ctx(fused_norm=False, fused_rope=False, fused_bias_act=False)
    extra = layer_activation_bytes(eager) - layer_activation_bytes(fused)
    assert extra == 2 * T * h * 4 + T * (32 * 128 + 8 * 128) * 4 + T * 14336 * 2
    # op-level checkpointing keeps the matmul outputs either way
    assert layer_activation_bytes(eager, recompute="selective_ops") == \
        layer_activation_bytes(fused, recompute="selective_ops")


def test_torchtitan_eager_holds_more_than_compiled_at_the_same_plan() -> None:
    import clustertwin as ct
    kw = dict(gpu="h100-sxm-96gb", num_gpus=8, seq_len=8192, global_batch=16, micro_batch=2,
              plan="tp=1,pp=1,dp=8,zero=3,rc=selective")
    eager = ct.predict("llama3-8b", framework="torchtitan-eager", **kw)
    compiled = ct.predict("llama3-8b", framework="torchtitan-compile", **kw)
    assert eager.memory.total_bytes > compiled.memory.total_bytes


# ---- the compiled context-parallel ring -----------------------------------------------------------------
def test_compiled_ring_holds_every_step_output_until_its_fused_merge() -> None:
    """Llama 3 8B at 256K tokens over cp 8: each of the 8 SDPA calls' bf16 block output (32768 x 32 x 128)
    and fp32 log-sum-exp (32768 x 32) stay alive until Inductor's one merge kernel: about 2.2 GB. The eager
    ring merges step by step and a single rank runs no ring."""
    ring = _llama_ctx(tokens=32768, seq_len=262144, cp=8, cp_ring="torch", cp_ring_compiled=True)
    assert cp_ring_transient_bytes(ring) == 8 * 32768 * 32 * (128 * 2 + 4)
    assert cp_ring_transient_bytes(_llama_ctx(tokens=32768, seq_len=262144, cp=8, cp_ring="torch")) == 0
    assert cp_ring_transient_bytes(_llama_ctx(cp_ring="torch", cp_ring_compiled=True)) == 0


def test_compiled_ring_transient_is_held_once_beside_the_kept_layers(monkeypatch) -> None:
    """predict's activations grow by the transient once (with its allocator share), not per layer in flight."""
    import clustertwin as ct
    import clustertwin.schedule.batch as batch
    kw = dict(gpu="h100-sxm", num_gpus=8, seq_len=65536, global_batch=4, micro_batch=1,
              plan="tp=1,pp=1,dp=4,cp=2,zero=3,rc=full", framework="torchtitan-compile")
    with_ring = ct.predict("llama3-8b", **kw).memory.breakdown_bytes
    monkeypatch.setattr(batch, "cp_ring_transient_bytes", lambda c: 0.0)
    import importlib
    predict_module = importlib.import_module("clustertwin.predict")
    monkeypatch.setattr(batch, "_PRICERS", {})          # no pricer or prediction kept from the first call
    monkeypatch.setattr(predict_module, "_BY_NAMES", {})
    without = ct.predict("llama3-8b", **kw).memory.breakdown_bytes
    transient = 2 * 32768 * 32 * (128 * 2 + 4)
    assert with_ring["activations"] - without["activations"] == pytest.approx(transient)
    assert with_ring["other"] - without["other"] == pytest.approx(value("memory.allocator_overhead") * transient)


# ---- the caching allocator ---------------------------------------------------------------------------
def test_allocator_rounding_rules() -> None:
    assert allocator_block_bytes(1) == 512 and allocator_block_bytes(1000) == 1024
    assert allocator_segment_bytes(100) == 2 * MiB                  # small pool: 2 MiB segments
    assert allocator_segment_bytes(MiB) == 2 * MiB
    assert allocator_segment_bytes(MiB + 1) == 20 * MiB             # 1-10 MiB: a 20 MiB segment
    assert allocator_segment_bytes(10 * MiB + 1) == 12 * MiB        # from 10 MiB: rounded up to 2 MiB
    assert allocator_segment_bytes(128 * MiB) == 128 * MiB


def test_reserved_bytes_by_the_rounding_rules() -> None:
    assert reserved_bytes([]) == 0
    assert reserved_bytes([100] * 3) == 2 * MiB                     # packed into one small segment
    assert reserved_bytes([3 * MiB] * 7) == 40 * MiB                # 21 MiB of 1-10 MiB blocks: two 20 MiB
    assert reserved_bytes([11 * MiB] * 3) == 36 * MiB               # each rounded up to 12 MiB
    assert reserved_bytes([11 * MiB] * 3, expandable_segments=True) == 40 * MiB   # 33 MiB in 20 MiB pages


def test_rounding_is_no_cause_of_large_reserved_overheads() -> None:
    """A Llama 3.1 8B layer's saved tensors at 8K tokens (hidden- and ffn-wide bf16 rows, fp32 lse):
    the rounding rules add well under 1%: what reserved adds beyond that is fragmentation."""
    T = 8192
    sizes = [T * 4096 * 2] * 4 + [T * 1024 * 2] * 2 + [T * 14336 * 2] * 3 + [T * 32 * 4]
    live = sizes * 32
    for expandable in (False, True):
        assert sum(live) <= reserved_bytes(live, expandable) < 1.01 * sum(live)
