"""A PyTorch decoder-only transformer built from a ModelSpec, exactly as clustertwin counts it.

gpt style: LayerNorm, GELU, learned positions, biases; llama style: RMSNorm, SwiGLU, RoPE, GQA, no
biases. The output head is untied unless the spec ties it. Attention is SDPA (causal). The number of
parameters equals ``ModelSpec.params_total``. Imports torch: import this module lazily.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import SpecError
from ..specs import ModelSpec


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight.to(x.dtype)


def make_norm(spec: ModelSpec) -> nn.Module:
    if spec.norm == "rmsnorm":
        return RMSNorm(spec.hidden_size)
    return nn.LayerNorm(spec.hidden_size, bias=spec.bias)


def rope_tables(seq: int, dim: int, theta: float = 10000.0, device=None):
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
    freqs = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    return freqs.cos(), freqs.sin()


def apply_rope(x, cos, sin):
    """x: (batch, heads, seq, dim); rotate the two halves of each head (GPT-NeoX / Llama layout)."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d].float(), x[..., d:2 * d].float()
    c, s = cos[: x.shape[-2]], sin[: x.shape[-2]]
    out = torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)
    return torch.cat([out, x[..., 2 * d:]], dim=-1) if x.shape[-1] > 2 * d else out


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        h, self.nh, self.kv = spec.hidden_size, spec.num_heads, spec.kv_heads
        self.dqk, self.dv = spec.qk_head_dim, spec.v_head_dim
        qkv_bias = spec.bias if spec.qkv_bias is None else spec.qkv_bias
        self.qkv = nn.Linear(h, self.nh * self.dqk + self.kv * (self.dqk + self.dv), bias=qkv_bias)
        self.out = nn.Linear(self.nh * self.dv, h, bias=spec.bias)
        self.rope = spec.positions == "rope"
        self.dropout = spec.dropout

    def forward(self, x, rope=None):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split([self.nh * self.dqk, self.kv * self.dqk, self.kv * self.dv], dim=-1)
        q = q.view(b, s, self.nh, self.dqk).transpose(1, 2)
        k = k.view(b, s, self.kv, self.dqk).transpose(1, 2)
        v = v.view(b, s, self.kv, self.dv).transpose(1, 2)
        if self.rope and rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        rep = self.nh // self.kv
        p = self.dropout if self.training else 0.0
        try:
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, enable_gqa=rep > 1)
        except TypeError:  # torch < 2.5
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                               dropout_p=p, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, s, self.nh * self.dv))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        h, f = spec.hidden_size, spec.ffn_hidden_size
        self.gated, self.act, self.f = spec.gated, spec.activation, f
        self.up = nn.Linear(h, (2 if self.gated else 1) * f, bias=spec.bias)  # gate and up fused for SwiGLU
        self.down = nn.Linear(f, h, bias=spec.bias)

    def forward(self, x):
        u = self.up(x)
        if self.gated:
            g, u = u.split(self.f, dim=-1)
            return self.down(F.silu(g) * u)
        if self.act == "gelu":
            return self.down(F.gelu(u, approximate="tanh"))
        r = F.relu(u)
        return self.down(r * r if self.act == "relu2" else r)


class Block(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.norm1, self.attn = make_norm(spec), Attention(spec)
        self.norm2, self.mlp = make_norm(spec), MLP(spec)
        self.drop = nn.Dropout(spec.dropout)

    def forward(self, x, rope=None):
        x = x + self.drop(self.attn(self.norm1(x), rope))
        return x + self.drop(self.mlp(self.norm2(x)))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec, recompute: str = "none"):
        super().__init__()
        if spec.is_moe or spec.mla is not None:
            raise SpecError("model", f"{spec.name} is a mixture-of-experts or MLA model",
                            "measure builds dense gpt/llama-style models only")
        self.spec, self.recompute = spec, recompute
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.pos = nn.Embedding(spec.max_seq_len, spec.hidden_size) if spec.positions == "learned" else None
        self.drop = nn.Dropout(spec.dropout)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.num_layers))
        self.norm = make_norm(spec)
        self.head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        if spec.tied_embeddings:
            self.head.weight = self.embed.weight
        self._rope_dim = spec.qk_head_dim if spec.positions == "rope" else 0
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02 / math.sqrt(1.0))
                if getattr(mod, "bias", None) is not None:
                    nn.init.zeros_(mod.bias)

    def forward(self, tokens):
        s = tokens.shape[1]
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(s, device=tokens.device))
        x = self.drop(x)
        rope = rope_tables(s, self._rope_dim, device=tokens.device) if self._rope_dim else None
        for blk in self.blocks:
            if self.recompute == "full" and self.training:
                from torch.utils.checkpoint import checkpoint
                x = checkpoint(blk, x, rope, use_reentrant=False)
            else:
                x = blk(x, rope)
        return self.head(self.norm(x))


def build_model(spec: ModelSpec, recompute: str = "none") -> Transformer:
    return Transformer(spec, recompute)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # shared (tied) tensors once
