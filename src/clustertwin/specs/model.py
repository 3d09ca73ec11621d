"""ModelSpec: a decoder-only transformer (dense or mixture-of-experts) and what follows from it.

Parameter counts are exact for the layouts described (embedding, attention, MLP or experts, norms,
biases, head); model FLOPs follow Narayanan et al. (SC21): two FLOPs per multiply-add, forward plus
backward = 3x forward, attention scores and values counted in full (no causal halving) unless asked.

>>> from clustertwin.catalog import load_model
>>> m = load_model("llama3-8b")
>>> round(m.params_total / 1e9, 2)
8.03
"""
from __future__ import annotations

from functools import cached_property
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import SpecError

Activation = Literal["gelu", "swiglu", "relu", "relu2"]
Norm = Literal["layernorm", "rmsnorm"]
Positions = Literal["learned", "rope"]


class Frozen(BaseModel):
    """Base of every spec: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy with ``update`` applied. Values a ``cached_property`` derived from the old fields
        are dropped from the copy, so they are derived again from the new ones."""
        new = super().model_copy(update=update, deep=deep)
        if update:
            fields = type(self).model_fields
            for k in [k for k in new.__dict__ if k not in fields]:
                del new.__dict__[k]
        return new


class MLASpec(Frozen):
    """DeepSeek multi-head latent attention (MLA), as it runs in training.

    Approximation used by clustertwin: the low-rank projections are priced and counted exactly
    (q down/up, kv down/up, output); the attention core is then standard multi-head attention with
    query/key head dim ``qk_nope_head_dim + qk_rope_head_dim`` and value head dim ``v_head_dim``.
    The compressed KV cache matters only for inference and is not modelled.
    """

    q_lora_rank: int | None = Field(None, gt=0, description="query down-projection rank; None = full query projection")
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class ModelSpec(Frozen):
    """A decoder-only transformer. Sizes are counts; nothing here depends on the hardware."""

    name: str = "custom"
    family: str = ""
    source: str = ""
    num_layers: int = Field(gt=0, le=10_000, description="transformer layers")
    hidden_size: int = Field(gt=0, le=1_000_000)
    num_heads: int = Field(gt=0, le=100_000)
    num_kv_heads: int | None = Field(None, gt=0, description="None = num_heads (MHA); 1 = MQA; else GQA")
    head_dim: int | None = Field(None, gt=0, description="None = hidden_size / num_heads")
    ffn_hidden_size: int = Field(gt=0, description="MLP width; for SwiGLU the width of one up projection")
    vocab_size: int = Field(gt=0, le=100_000_000)
    max_seq_len: int = Field(gt=0, le=100_000_000)
    activation: Activation = "gelu"
    norm: Norm = "layernorm"
    positions: Positions = "learned"
    bias: bool = Field(True, description="biases on linear layers (and LayerNorm)")
    qkv_bias: bool | None = Field(None, description="None = same as bias (Qwen2 has QKV biases only)")
    tied_embeddings: bool = False
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="hidden/attention dropout in training (Megatron GPT: 0.1)")
    mla: MLASpec | None = None
    # mixture of experts
    moe_num_experts: int = Field(0, ge=0, le=100_000, description="routed experts; 0 = dense")
    moe_top_k: int = Field(0, ge=0)
    moe_ffn_hidden_size: int | None = Field(None, gt=0, description="expert MLP width; None = ffn_hidden_size")
    moe_num_shared_experts: int = Field(0, ge=0)
    moe_shared_ffn_hidden_size: int | None = Field(
        None, gt=0, description="total width of the shared expert(s); None = shared experts x expert width")
    moe_layer_freq: int = Field(1, gt=0, description="every k-th layer (after the first dense ones) is MoE")
    moe_first_dense_layers: int = Field(0, ge=0, description="leading layers that stay dense (DeepSeek-V3: 3)")
    moe_expert_groups: int = Field(0, ge=0, description="group-limited routing: experts split into this many groups "
                                   "(DeepSeek-V3 n_group 8); 0 = no groups")
    moe_topk_groups: int = Field(0, ge=0, description="groups a token's experts may come from (DeepSeek-V3 "
                                 "topk_group 4: with one group per node, at most 4 nodes per token)")
    mtp_depth: int = Field(0, ge=0, le=16, description="multi-token-prediction modules trained beside the model "
                           "(DeepSeek-V3 Sec. 2.2: D = 1), each one more transformer block, an h x 2h projection "
                           "and the shared output head run again on the last stage; not in the parameter counts")

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        kv = self.kv_heads
        if self.num_heads % kv:
            raise SpecError("num_kv_heads", f"{kv} does not divide num_heads={self.num_heads}",
                            "choose kv heads that divide the query heads (GQA groups must be equal)")
        if self.head_dim is None and self.mla is None and self.hidden_size % self.num_heads:
            raise SpecError("num_heads", f"{self.num_heads} does not divide hidden_size={self.hidden_size}",
                            "set head_dim explicitly or choose heads that divide hidden")
        if self.moe_num_experts:
            if not 0 < self.moe_top_k <= self.moe_num_experts:
                raise SpecError("moe_top_k", f"{self.moe_top_k} must be between 1 and moe_num_experts={self.moe_num_experts}",
                                "set moe_top_k to the number of experts each token is routed to")
            if self.moe_expert_groups and (self.moe_num_experts % self.moe_expert_groups
                                           or not 0 < self.moe_topk_groups <= self.moe_expert_groups):
                raise SpecError("moe_expert_groups", f"{self.moe_expert_groups} groups with moe_topk_groups="
                                f"{self.moe_topk_groups} do not fit {self.moe_num_experts} experts",
                                "use groups dividing the experts and 1 <= moe_topk_groups <= moe_expert_groups")
            if self.moe_first_dense_layers >= self.num_layers:
                raise SpecError("moe_first_dense_layers", f"{self.moe_first_dense_layers} leaves no MoE layer",
                                f"use fewer than num_layers={self.num_layers}")
        elif self.moe_top_k or self.moe_num_shared_experts:
            raise SpecError("moe_num_experts", "moe_top_k or shared experts given without experts",
                            "set moe_num_experts > 0 or drop the MoE fields")
        return self

    # ---- resolved dimensions -------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def qk_head_dim(self) -> int:
        if self.mla:
            return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def v_head_dim(self) -> int:
        return self.mla.v_head_dim if self.mla else self.qk_head_dim

    @property
    def is_moe(self) -> bool:
        return self.moe_num_experts > 0

    @property
    def gated(self) -> bool:
        return self.activation == "swiglu"

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def shared_ffn(self) -> int:
        if not self.moe_num_shared_experts:
            return 0
        return self.moe_shared_ffn_hidden_size or self.moe_num_shared_experts * self.expert_ffn

    def is_moe_layer(self, index: int) -> bool:
        if not self.is_moe or index < self.moe_first_dense_layers:
            return False
        return (index - self.moe_first_dense_layers) % self.moe_layer_freq == 0

    @cached_property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    # ---- parameter counts ------------------------------------------------------------------
    def _mlp_params(self, width: int) -> int:
        h = self.hidden_size
        ups = 2 if self.gated else 1
        weights = (ups + 1) * h * width
        biases = (ups * width + h) if self.bias else 0
        return weights + biases

    @cached_property
    def attention_params(self) -> int:
        """Weights (and biases) of one attention block, norm excluded."""
        h, nh = self.hidden_size, self.num_heads
        if self.mla:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * nh * qk) if m.q_lora_rank else h * nh * qk
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank + m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + nh * m.v_head_dim * h
        q_out = nh * self.qk_head_dim
        kv_out = self.kv_heads * (self.qk_head_dim + self.v_head_dim)
        params = h * (q_out + kv_out) + nh * self.v_head_dim * h
        qkv_bias = self.bias if self.qkv_bias is None else self.qkv_bias
        if qkv_bias:
            params += q_out + kv_out
        if self.bias:
            params += h
        return params

    @property
    def norm_params(self) -> int:
        return self.hidden_size * (2 if self.norm == "layernorm" and self.bias else 1)

    @cached_property
    def dense_mlp_params(self) -> int:
        return self._mlp_params(self.ffn_hidden_size)

    @cached_property
    def expert_params(self) -> int:
        """One routed expert."""
        return self._mlp_params(self.expert_ffn)

    @cached_property
    def shared_expert_params(self) -> int:
        return self._mlp_params(self.shared_ffn) if self.shared_ffn else 0

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.moe_num_experts

    def layer_params(self, index: int) -> int:
        common = self.attention_params + 2 * self.norm_params
        if self.is_moe_layer(index):
            return common + self.router_params + self.moe_num_experts * self.expert_params + self.shared_expert_params
        return common + self.dense_mlp_params

    def layer_active_params(self, index: int) -> int:
        common = self.attention_params + 2 * self.norm_params
        if self.is_moe_layer(index):
            return common + self.router_params + self.moe_top_k * self.expert_params + self.shared_expert_params
        return common + self.dense_mlp_params

    @cached_property
    def params_embedding(self) -> int:
        """Token embedding, learned positions and an untied output head."""
        emb = self.vocab_size * self.hidden_size
        if self.positions == "learned":
            emb += self.max_seq_len * self.hidden_size
        if not self.tied_embeddings:
            emb += self.vocab_size * self.hidden_size
        return emb

    @cached_property
    def params_non_embedding(self) -> int:
        return sum(self.layer_params(i) for i in range(self.num_layers)) + self.norm_params

    @cached_property
    def params_total(self) -> int:
        return self.params_embedding + self.params_non_embedding

    @cached_property
    def params_active(self) -> int:
        """Parameters a token touches (embeddings included); equals params_total for dense models."""
        layers = sum(self.layer_active_params(i) for i in range(self.num_layers))
        return self.params_embedding + layers + self.norm_params

    # ---- FLOPs ------------------------------------------------------------------------------
    @cached_property
    def matmul_params_active(self) -> int:
        """Weights in GEMMs a token goes through, output head included (even when tied)."""
        per_layer = 0
        for i in range(self.num_layers):
            per_layer += self.layer_active_params(i) - 2 * self.norm_params
        return per_layer + self.vocab_size * self.hidden_size

    def attention_flops_per_token(self, seq_len: int, causal: bool = False) -> float:
        """Forward FLOPs of the attention core (QK^T and AV) per token, all layers."""
        per_layer = 2.0 * seq_len * self.num_heads * (self.qk_head_dim + self.v_head_dim)
        return per_layer * self.num_layers * (0.5 if causal else 1.0)

    def flops_per_token(self, seq_len: int | None = None, causal: bool = False) -> float:
        """Model FLOPs per trained token (forward + backward, no recomputation): 6·N + attention."""
        s = seq_len or self.max_seq_len
        return 3.0 * (2.0 * self.matmul_params_active + self.attention_flops_per_token(s, causal))

    def summary(self) -> dict:
        return {
            "name": self.name,
            "params_total": self.params_total,
            "params_active": self.params_active,
            "params_embedding": self.params_embedding,
            "params_non_embedding": self.params_non_embedding,
            "flops_per_token": self.flops_per_token(),
        }
