"""Published plans ran, so they fit, and their throughput is what their papers report (issue 16, item 6).

- DeepSeek-V3 on DeepSeek's 2,048 H800s (catalog cluster deepseek-v3-h800) on DeepSeek's stack (hai-llm:
  DualPipe, RMSNorm / MLA up-projection recomputation, FP8 activation caches, BF16 AdamW moments; Sec. 3.2.1,
  3.2.3, 3.3.3) with the report's plan:
  PP 16, EP 64 across 8 nodes, no TP (DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 3.2), FP8
  GEMMs (Sec. 3.3), sequences of 4,096 in batches of 15,360 (Sec. 4.2), node-limited routing with the
  dispatch deduplicated per node (Sec. 2.1.2, 3.2.2: the deepep dispatcher). The report's cost: 2,664K
  H800 GPU-hours of pre-training for 14.8T tokens, 180K per trillion tokens (Sec. 1 and Table 1).
- Llama 3 405B on 16,384 H100s with Table 4's plan (TP 8, PP 16, DP 128, 8K sequences, no activation
  checkpointing at 8K; The Llama 3 Herd of Models, arXiv 2407.21783, Sec. 3.3.2) on Meta's stack as the
  paper documents it (meta-llama3: FSDP sharding optimizer states and gradients, each pipeline chunk's
  gradient reduce-scattered once its contiguous micro-batches have run their backward) with its pipeline
  layout: "the first model chunk on the first stage has only the embedding, and the last model chunk on
  the last stage has only output projection and loss calculation", after one Transformer layer was taken
  from each. A first chunk holding nothing but the embedding means chunks of one layer slot: 126 layers
  + embedding + loss = 128 slots = PP 16 x V 8 (vpp 8, first=0, last=0).
"""
from __future__ import annotations

import pytest

import clustertwin as ct

DEEPSEEK_GPU_HOURS_PER_T = 180e3     # arXiv 2412.19437 Sec. 1: 180K H800 GPU hours per trillion tokens


@pytest.fixture(scope="module")
def deepseek():
    """The plan on DeepSeek's own stack (hai-llm: DualPipe, RMSNorm and MLA up-projection recomputation,
    FP8 activation caches, BF16 AdamW moments; specs/framework.py)."""
    return ct.predict("deepseek-v3", cluster="deepseek-v3-h800", seq_len=4096, global_batch=15360, micro_batch=1,
                      precision="fp8", framework="hai-llm",
                      plan="tp=1,pp=16,ep=64,dp=128,zero=1,moe_dispatcher=deepep,recompute=selective")


LLAMA405B_PLAN = "tp=8,pp=16,vpp=8,dp=128,sp=1,zero=2,first=0,last=0"


@pytest.fixture(scope="module")
def llama405b():
    return ct.predict("llama3.1-405b", gpu="h100-sxm", num_gpus=16384, seq_len=8192, global_batch=2048,
                      micro_batch=1, plan=LLAMA405B_PLAN, framework="meta-llama3")


def _gpu_hours_per_t(pred) -> float:
    return pred.job.cluster.num_gpus * 1e12 / pred.tokens_per_s / 3600


def test_deepseek_v3_gpu_hours_per_trillion_tokens(deepseek) -> None:
    """Within 25% of the published 180K (the issue's bound for any one run): ~166K (-8%) with the MTP
    module (Sec. 2.2, D = 1) on the last stage and DualPipe's unpaired chunks, pair chains and fill/drain
    priced from the reference order; still left out: the batch-size ramp, routing imbalance
    beyond uniform, restarts and evaluation."""
    assert _gpu_hours_per_t(deepseek) == pytest.approx(DEEPSEEK_GPU_HOURS_PER_T, rel=0.25)


def test_deepseek_v3_documented_stack_is_not_slower_than_published(deepseek) -> None:
    """Everything the report describes is priced and everything it leaves out would only add time
    (the batch-size ramp, imbalance, restarts): the model is below 180K, and the
    exposed all-to-all is what the SM share leaves, not the whole exchange."""
    assert _gpu_hours_per_t(deepseek) < DEEPSEEK_GPU_HOURS_PER_T
    m = deepseek.step.num_microbatches
    crit = next(st for st in deepseek.step.stages if st.stage == deepseek.step.critical_stage)
    # the critical rank's unpaired chunks (3H - x - 1 + [middle] of the reference order, H = 8) expose
    # their all-to-alls, its overlapped pairs what DualPipe's overlap leaves (pair_ep_s)
    x = min(crit.stage, 15 - crit.stage)
    alone = (3 * 8 - x - 1 + (x == 7)) / m
    assert deepseek.breakdown_s["ep_comm"] == pytest.approx(m * (alone * crit.ep_s + (1 - alone) * crit.pair_ep_s))
    share = 20 / deepseek.job.cluster.gpu.sm_count                      # DeepSeek-V3 Sec. 3.2.2: 20 of 132 SMs
    assert crit.pair_ep_s >= share * crit.ep_s - 1e-12           # the two kinds of pairs hold all of ep_s
    assert deepseek.breakdown_s["ep_comm"] < 0.5 * m * crit.ep_s


def test_deepseek_v3_published_plan_fits(deepseek) -> None:
    assert deepseek.fits


def test_deepseek_v3_memory_by_part(deepseek) -> None:
    """The busiest rank by hand: it holds two stages of 4 MoE layers (DualPipe's 2x parameters) and
    PP + 1 = 17 micro-batches of one stage's activations (Table 2); optimizer states are FP32 master
    weights with BF16 moments (8 bytes per parameter, ZeRO-1 sharded), gradients FP32 (Sec. 3.3.3).
    Per token and MoE layer: the two norm inputs (2 x 14,336 B), the FP8 norm outputs (2 x 7,168 x
    1.03125, the 1x128 tile scales), the MLA latents (2 x (1,536 + 512 + 64)), the E5M6 attention
    output (16,384 x 1.5) and its log-sum-exp (128 x 4), 8 gate scores (fp32), 8 dispatched tokens and
    8 + 1 SwiGLU inputs (2 x 2,048 each) in FP8: 169,952 bytes."""
    mem = deepseek.memory.breakdown_bytes
    per_token = (2 * 14336 + 2 * 7168 * 1.03125 + 2 * (1536 + 512 + 64) + 16384 * 1.5 + 128 * 4
                 + 8 * 4 + (8 * 7168 + 9 * 4096) * 1.03125)
    assert per_token == 169952
    layers, tokens = 4, 4096
    from clustertwin.constants import value
    held = 17 * layers * tokens * per_token
    assert deepseek.memory.critical_stage not in (0, 15)
    recomputed = mem["activations"] - held      # the layer being recomputed, during its backward
    assert 0 < recomputed < 4096 * 561664        # at most one layer's whole set of activations
    assert mem["gradients"] == pytest.approx(2 * mem["weights"])            # FP32 gradients, BF16 weights
    assert mem["optimizer"] / mem["weights"] < 8 / 2                         # 8 bytes/param, sharded over DP
    assert mem["other"] > value("memory.base_bytes")


def test_deepseek_v3_fit_turns_on_what_the_combine_keeps(deepseek) -> None:
    """Had the combine kept the 8 expert outputs in BF16 for the gate's gradient (8 x 14,336 B per token
    and MoE layer), the plan would not fit: the fit rests on the stated assumption that the gate
    gradient comes from the recomputed SwiGLU output (docs/validation.md)."""
    extra = 17 * 4 * 4096 * 8 * 7168 * 2
    assert deepseek.memory.total_bytes + extra > deepseek.memory.capacity_bytes


def test_deepseek_v3_without_the_stack_does_not_fit() -> None:
    """Megatron-Core's defaults for the same plan (1F1B, attention-core recomputation, BF16 caches, FP32
    moments) hold ~151 GiB on stage 1: the fit comes from the documented mechanisms."""
    pred = ct.predict("deepseek-v3", cluster="deepseek-v3-h800", seq_len=4096, global_batch=15360, micro_batch=1,
                      precision="fp8", plan="tp=1,pp=16,ep=64,dp=128,zero=1,moe_dispatcher=deepep")
    assert not pred.fits


def test_llama3_405b_published_plan_fits(llama405b) -> None:
    assert llama405b.fits


def test_llama3_405b_published_plan_memory_by_part(llama405b) -> None:
    """Stage 1 of the 16K-GPU plan, by hand: 8 chunks of one layer; with 16 micro-batches (16 sequences per
    DP rank, one per micro-batch) the interleaved warm-up (2 x 14 + 7 x 16 + 1 = 141 chunk passes) exceeds
    the step's 16 x 8, so every forward runs before the first backward and the stage holds all 128 layer
    passes at 0.50 GiB; gradients are the FP32 shard over DP 128 plus two of the eight chunks unsharded
    (the one accumulating, the one being reduce-scattered); bf16 weights stay gathered (not resharded
    after forward); FSDP's per-unit buffers are churned, so the allocator allowance covers them too."""
    mem = llama405b.memory.breakdown_bytes
    assert llama405b.memory.critical_stage == 1
    layer_mb = mem["activations"] / (16 * 8)
    assert layer_mb / 2**30 == pytest.approx(0.50, abs=0.01)
    params = mem["weights"] / 2                                               # the stage's parameters, bf16
    assert mem["gradients"] == pytest.approx(4 * params * (1 / 128 + 2 / 8))
    from clustertwin.constants import value
    allowance = value("memory.allocator_overhead") * (mem["activations"] + mem["weights"] + mem["gradients"])
    assert mem["other"] == pytest.approx(value("memory.base_bytes") + allowance, rel=0.01)


def test_llama3_405b_whole_stage_gradients_do_not_fit() -> None:
    """The same plan with Megatron-Core's gradient buffer (the stage's FP32 gradients live through the step)
    holds 86 GiB: the fit comes from the sharded gradients the paper documents, not from the layout."""
    pred = ct.predict("llama3.1-405b", gpu="h100-sxm", num_gpus=16384, seq_len=8192, global_batch=2048,
                      micro_batch=1, plan=LLAMA405B_PLAN, framework="megatron")
    assert not pred.fits
    assert pred.memory.breakdown_bytes["gradients"] == pytest.approx(2 * pred.memory.breakdown_bytes["weights"])


# Table 4 of the Llama 3 paper: BF16 MFU 43% on 8,192 GPUs (DP 64, 32 sequences per DP rank) and 41% on
# 16,384 (DP 128, 16), both TP 8, PP 16, 8K sequences, 16M tokens per batch; printed to whole percent
LLAMA405B_MFU_8K_GPUS, LLAMA405B_MFU_16K_GPUS = 0.43, 0.41


@pytest.fixture(scope="module")
def llama405b_8k_gpus():
    return ct.predict("llama3.1-405b", gpu="h100-sxm", num_gpus=8192, seq_len=8192, global_batch=2048,
                      micro_batch=1, plan=LLAMA405B_PLAN.replace("dp=128", "dp=64"), framework="meta-llama3")


def test_llama3_405b_documented_schedule_scales_as_published(llama405b, llama405b_8k_gpus) -> None:
    """From 8,192 to 16,384 GPUs the batch per DP rank halves (32 -> 16 micro-batches) and Table 4's MFU
    falls from 43% to 41%: a ratio of 0.953, 0.931-0.976 within the rounding of both. The documented
    schedule (V 8 one-layer chunks) keeps the model's ratio inside that band but for its fill and drain:
    the depth-first schedule (N = PP = 16) crosses all 127 chunk boundaries each way, 254 sends of
    0.73 ms, 0.18 s a step at either scale (the replay shows it too), which lowers the ratio to 0.925,
    within 1% of the band; with either attention count. What the model still misses of Table 4 must
    then grow with the micro-batches, not be a cost per step. A non-interleaved 1F1B schedule (bubble
    15/31 of the step at 16 micro-batches) is far outside (0.75)."""
    lo, hi = (LLAMA405B_MFU_16K_GPUS - 0.005) / (LLAMA405B_MFU_8K_GPUS + 0.005), \
        (LLAMA405B_MFU_16K_GPUS + 0.005) / (LLAMA405B_MFU_8K_GPUS - 0.005)
    without_fill_sends = [p.step_time_s - p.breakdown_s["pp_comm"] for p in (llama405b_8k_gpus, llama405b)]
    assert lo <= without_fill_sends[0] / (2 * without_fill_sends[1]) <= hi
    assert lo - 0.01 <= llama405b.mfu / llama405b_8k_gpus.mfu <= hi
    assert lo - 0.01 <= llama405b.mfu_full_attention / llama405b_8k_gpus.mfu_full_attention <= hi
    one_f_one_b = [ct.predict("llama3.1-405b", gpu="h100-sxm", num_gpus=n, seq_len=8192, global_batch=2048,
                              micro_batch=1, plan=f"tp=8,pp=16,dp={n // 128},sp=1,zero=2", framework="meta-llama3")
                   for n in (8192, 16384)]
    assert one_f_one_b[1].mfu / one_f_one_b[0].mfu < lo


def test_llama3_405b_documented_stack_is_not_slower_than_published(llama405b, llama405b_8k_gpus) -> None:
    """What the paper leaves out (its kernels' efficiency, stragglers, the 1-2% diurnal throughput swing of
    Sec. 3.3.4) would only add time: with either attention count (causal as the time prices it, or in
    full as PaLM counts it) the model's MFU on the documented plan is at least the published one."""
    for pred, published in ((llama405b, LLAMA405B_MFU_16K_GPUS), (llama405b_8k_gpus, LLAMA405B_MFU_8K_GPUS)):
        assert pred.mfu >= published and pred.mfu_full_attention >= published


@pytest.mark.xfail(strict=True, reason="the documented stack gives 47.2% MFU on 16K GPUs with causal attention "
                                       "(49.1% counting it in full) against the published 41%: +15-20%, and "
                                       "+19-23% on 8K GPUs (51.0% / 53.0% against 43%), with the interleaved "
                                       "schedule's 254 fill/drain sends and the wait for the slowest GPU "
                                       "priced. Neither count "
                                       "closes it (Table 4's 128K row at 380 TFLOP/s rules out a 6N-only count). "
                                       "The gap is 0.07-0.09 s per micro-batch at both scales (Table 4's "
                                       "TFLOP/s give steps 1.1-1.4 s longer at 16 micro-batches, 2.2-2.7 s at "
                                       "32), 25-32% of a micro-batch's compute: "
                                       "a cost per chunk pass, not per step. Sized and ruled out as its cause: "
                                       "every pipeline send exposed (0.19 s / 0.37 s a step), host time per "
                                       "chunk (~0.06 s), the per-chunk FP32 reduce-scatter (0.09 s exposed), "
                                       "the diurnal 1-2% (Sec. 3.3.4); what is left is the "
                                       "per-GPU efficiency of Meta's 2024 kernels (or the document-mask "
                                       "imbalance, Sec. 3.3.2), which the paper does not document (the model "
                                       "prices NeMo 25.02's 405B at 55% MFU on 2,048 H100s within 2%)")
def test_llama3_405b_documented_stack_mfu_within_15_percent(llama405b, llama405b_8k_gpus) -> None:
    """Within 15% of Table 4's MFU on the paper's plan and schedule: the bound the row would need to move
    to the documented stack (data/validation/dense_public_runs.csv still prices it as 1F1B on Megatron)."""
    assert llama405b.mfu == pytest.approx(LLAMA405B_MFU_16K_GPUS, rel=0.15)
    assert llama405b_8k_gpus.mfu == pytest.approx(LLAMA405B_MFU_8K_GPUS, rel=0.15)
