"""Layer contexts shared by the MoE tests (a helper module, not a test file)."""
from __future__ import annotations

from clustertwin.workload.transformer import LayerContext


def qwen3_moe_ctx(**kw) -> LayerContext:
    """One Qwen3-30B-A3B-like MoE layer on one of 8 EP ranks (16 local experts of width 768); ``kw``
    overrides any field."""
    base = dict(micro_batch=1, seq_len=4096, tokens=4096, hidden=2048, heads=32, kv_heads=4, qk_head_dim=128,
                v_head_dim=128, ffn=768, tp=1, cp=1, sp=False, gated=True, norm="rmsnorm", rope=True, bias=False,
                dropout=False, attention_kernel="flash", gemm_dtype="bf16", act_bytes=2, fused_bias_act=True,
                fused_residual=True, fused_rope=True, experts_local=16, top_k=8, ep=8, expert_ffn=768,
                num_experts=128, moe_dispatcher="alltoall")
    base.update(kw)
    return LayerContext(**base)
