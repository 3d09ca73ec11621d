"""Published plans ran, so they fit, and their throughput is what their papers report (issue 16, item 6).

- DeepSeek-V3 on DeepSeek's 2,048 H800s (catalog cluster deepseek-v3-h800) with the report's plan:
  PP 16, EP 64 across 8 nodes, no TP (DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 3.2), FP8
  GEMMs (Sec. 3.3), sequences of 4,096 in batches of 15,360 (Sec. 4.2), node-limited routing with the
  dispatch deduplicated per node (Sec. 2.1.2, 3.2.2: the deepep dispatcher). The report's cost: 2,664K
  H800 GPU-hours of pre-training for 14.8T tokens, 180K per trillion tokens (Sec. 1 and Table 1).
- Llama 3 405B on 16,384 H100s with Table 4's plan (TP 8, PP 16, DP 128, 8K sequences, no activation
  checkpointing at 8K; The Llama 3 Herd of Models, arXiv 2407.21783, Sec. 3.3.2).
"""
from __future__ import annotations

import pytest

import clustertwin as ct

DEEPSEEK_GPU_HOURS_PER_T = 180e3     # arXiv 2412.19437 Sec. 1: 180K H800 GPU hours per trillion tokens


@pytest.fixture(scope="module")
def deepseek():
    return ct.predict("deepseek-v3", cluster="deepseek-v3-h800", seq_len=4096, global_batch=15360, micro_batch=1,
                      precision="fp8", plan="tp=1,pp=16,ep=64,dp=128,zero=1,moe_dispatcher=deepep")


@pytest.fixture(scope="module")
def llama405b():
    return ct.predict("llama3.1-405b", gpu="h100-sxm", num_gpus=16384, seq_len=8192, global_batch=2048,
                      micro_batch=1, plan="tp=8,pp=16,dp=128,sp=1,zero=2")


def test_deepseek_v3_gpu_hours_per_trillion_tokens(deepseek) -> None:
    """Within 25% of the published 180K (the issue's bound for any one run). The model gives ~199K
    (+10%) with every all-to-all exposed: DualPipe's overlap of dispatch and combine with the other
    micro-batch's compute (Sec. 3.2.1) is not modelled and would take up to ep_comm (~5.8 s of ~22 s)
    off, which bounds the model's figure from below at ~150K (-17%)."""
    gpu_hours = deepseek.job.cluster.num_gpus * 1e12 / deepseek.tokens_per_s / 3600
    assert gpu_hours == pytest.approx(DEEPSEEK_GPU_HOURS_PER_T, rel=0.25)
    without_a2a = gpu_hours * (1 - deepseek.breakdown_s["ep_comm"] / deepseek.step_time_s)
    assert without_a2a < DEEPSEEK_GPU_HOURS_PER_T < gpu_hours * 1.25


@pytest.mark.xfail(strict=True, reason="DeepSeek's memory savings are not modelled: recomputing every RMSNorm and "
                                       "MLA up-projection in backward (Sec. 3.2.3), caching MoE and attention-"
                                       "output activations in FP8 and recomputing the SwiGLU output (Sec. 3.3.3); "
                                       "stage 1 holds 15 micro-batches x 4 MoE layers x 2.14 GiB = 129 GiB")
def test_deepseek_v3_published_plan_fits(deepseek) -> None:
    assert deepseek.fits


@pytest.mark.xfail(strict=True, reason="82.1 GiB: stage 1 holds 15 micro-batches x 8 layers x 0.50 GiB of activations "
                                       "(1F1B, SP, no recompute) beside 11.9 GiB of fp32 gradients accumulated "
                                       "over 16 micro-batches and 5.9 GiB of bf16 weights; 2 GiB over 80 GiB")
def test_llama3_405b_published_plan_fits(llama405b) -> None:
    assert llama405b.fits


def test_llama3_405b_published_plan_memory_by_part(llama405b) -> None:
    """Stage 1 of the 16K-GPU plan, by hand: 15 micro-batches in flight (1F1B, p = 16) x 8 layers;
    fp32 gradients of the stage's parameters accumulated over the step (Llama 3 paper Sec. 3.3.2:
    FP32 gradient accumulation); bf16 weights; Megatron-Core's contiguous parameter and gradient
    buffers leave no fragmentation, so the allocator allowance covers the activations only."""
    mem = llama405b.memory.breakdown_bytes
    assert mem["gradients"] == pytest.approx(2 * mem["weights"])             # 4-byte grads, 2-byte weights
    layer_mb = mem["activations"] / (15 * 8)
    assert layer_mb / 2**30 == pytest.approx(0.50, abs=0.01)
    from clustertwin.constants import value
    allowance = value("memory.allocator_overhead") * mem["activations"]
    assert mem["other"] == pytest.approx(value("memory.base_bytes") + allowance, rel=0.01)

