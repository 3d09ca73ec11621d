"""ROCm-specific kernel paths of the serving engines: vLLM's unfused per-channel FP8 GEMM on AMD GPUs before
0.7.3, and the block-FP8 (DeepSeek) K-step floor that the same Triton kernel sets on AMD GPUs."""
from __future__ import annotations

import dataclasses

import pytest

from clustertwin.catalog import cluster_for_gpu, load_model
from clustertwin.constants import value
from clustertwin.serve.engines import engine_for_platform, get_engine
from clustertwin.serve.run import ServeRequest, build_setup
from clustertwin.serve.workload import ServeSetup, StepPricer, kernel_counts

OLD_ROCM_VLLM = "0.6.3.dev109+gcb3b2b9b.d20241010"   # the embeddedllm/vllm-rocm image of dstack's MI300X runs


def test_platform_rule_holds_for_old_vllm_on_amd_only():
    vllm = get_engine("vllm")
    old, notes = engine_for_platform(vllm, OLD_ROCM_VLLM, "amd")
    assert old.rocm_fp8_channelwise_unfused and len(notes) == 1 and "unfused" in notes[0]
    assert engine_for_platform(vllm, "0.7.3", "amd")[0] == vllm          # row-wise scaled GEMM from 0.7.3
    on_cuda = engine_for_platform(vllm, OLD_ROCM_VLLM, "nvidia")[0]
    assert not on_cuda.rocm_fp8_channelwise_unfused                       # CUTLASS fuses the scales on CUDA
    assert on_cuda == dataclasses.replace(vllm, mla_cache_align_bytes=on_cuda.mla_cache_align_bytes)  # V0's MLA padding only
    assert engine_for_platform(vllm, None, "amd")[0] == vllm              # unknown release: current defaults
    assert engine_for_platform(get_engine("sglang"), "0.4.1", "amd")[0] == get_engine("sglang")


def _pricers(gpu: str, precision: str) -> tuple[StepPricer, StepPricer]:
    """(fused, unfused) pricers of Llama-3.1-405B at tp 8 on ``gpu``."""
    model, cluster = load_model("llama3.1-405b"), cluster_for_gpu(gpu, 8)
    vllm = get_engine("vllm")
    fused = ServeSetup(model, cluster, tp=8, precision=precision, engine=vllm)
    unfused = dataclasses.replace(fused, engine=dataclasses.replace(vllm, rocm_fp8_channelwise_unfused=True))
    return StepPricer(fused), StepPricer(unfused)


@pytest.mark.parametrize("tokens", [4, 256, 4096])
def test_unfused_epilogue_adds_its_bytes_and_kernels(tokens):
    fused, unfused = _pricers("mi300x", "fp8-ffn")
    a = fused.price(decode_seqs=tokens, decode_context=tokens * 100)
    b = unfused.price(decode_seqs=tokens, decode_context=tokens * 100)
    m = load_model("llama3.1-405b")
    # inner layers' FP8 GEMMs: gate_up (2 x ffn / tp outputs) and down (hidden outputs), each token's row
    inner = m.num_layers - 2
    elems = tokens * (2 * m.ffn_hidden_size / 8 + m.hidden_size) * inner
    extra = elems * value("serve.fp8_channelwise_unfused_bytes") / fused.mem_bw
    assert b.memory_bound_s + b.gemm_s - (a.memory_bound_s + a.gemm_s) == pytest.approx(extra, rel=1e-6)
    per_gemm = kernel_counts("vllm")["fp8_channelwise_dequant_rocm"]
    assert unfused.kernels - fused.kernels == per_gemm * 2 * m.num_layers   # 2 FP8 GEMMs a layer
    assert b.total_s > a.total_s
    assert sum(b.breakdown().values()) == pytest.approx(b.total_s)


@pytest.mark.parametrize("gpu,precision", [("h100-sxm", "fp8-ffn"), ("mi300x", "fp8"), ("mi300x", "bf16")])
def test_unfused_path_needs_an_amd_gpu_and_a_per_channel_checkpoint(gpu, precision):
    fused, unfused = _pricers(gpu, precision)
    assert unfused.price(decode_seqs=64, decode_context=6400) == fused.price(decode_seqs=64, decode_context=6400)
    assert unfused.kernels == fused.kernels


def test_build_setup_applies_the_platform_rule_to_a_rocm_run():
    q = ServeRequest(model="llama3.1-405b", gpu="mi300x", num_gpus=8, plan="tp=8", engine="vllm",
                     engine_version=OLD_ROCM_VLLM, precision="fp8-ffn", input_len=128, output_len=128,
                     num_requests=4)
    setup, notes = build_setup(q)
    assert setup.engine.rocm_fp8_channelwise_unfused
    assert any("unfused" in n for n in notes)
    h100, _ = build_setup(dataclasses.replace(q, gpu="h100-sxm"))
    assert not h100.engine.rocm_fp8_channelwise_unfused
    # a per-tensor checkpoint never runs the fallback: no assumption about it in the notes
    _, per_tensor = build_setup(dataclasses.replace(q, precision="fp8"))
    assert not any("unfused" in n for n in per_tensor)


@pytest.mark.parametrize("engine,version", [("sglang", "0.4.2.post4"), ("vllm", "0.7.3.dev138+g21f6ca217")])
def test_block_fp8_k_step_floor_holds_on_amd_gpus(engine, version):
    """AMD GPUs run the same Triton block-FP8 GEMM (no CUTLASS or DeepGEMM off CUDA): its chain of 128-wide K
    steps floors a decode-size GEMM there too, at H100's time a step."""
    q = ServeRequest(model="deepseek-v3", gpu="mi300x", num_gpus=8, plan="tp=8", engine=engine,
                     engine_version=version, precision="fp8", input_len=128, output_len=128, num_requests=4)
    setup, _ = build_setup(q)
    p = StepPricer(setup)
    k = load_model("deepseek-v3").hidden_size
    assert p.block_fp8_floor("attn.kv_a", k) == pytest.approx(k / 128 * value("serve.block_fp8_k_step_s"))
    assert p.block_fp8_floor("moe.experts_up", k) == 0.0     # the fused MoE kernel: not priced by the floor
    newer, _ = build_setup(dataclasses.replace(q, engine_version="0.8.0" if engine == "vllm" else "0.4.4"))
    assert StepPricer(newer).block_fp8_floor("attn.kv_a", k) == 0.0   # the releases' rules, unchanged
