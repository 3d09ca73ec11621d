"""ModelSpec from a Hugging Face ``config.json`` (no network, no ``transformers`` needed).

Supported layouts (``model_type``, or the class in ``architectures`` when that is missing):
llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gpt2, deepseek_v2, deepseek_v3.

What the mapping keeps and what it drops, per family:

* Llama / Mistral / Qwen: gated MLP (``silu`` -> ``swiglu``), RMSNorm, RoPE, GQA from
  ``num_key_value_heads``, ``head_dim`` when given. Qwen2 has biases on q/k/v only.
* Mixtral: ``num_local_experts`` experts of width ``intermediate_size``, ``num_experts_per_tok``.
* Qwen2-MoE / Qwen3-MoE: ``num_experts`` of width ``moe_intermediate_size``; Qwen2-MoE's shared expert of
  width ``shared_expert_intermediate_size``. ``decoder_sparse_step`` and ``mlp_only_layers`` are
  mapped to leading dense layers + every k-th layer MoE where that describes the same layers.
  The shared-expert gate (hidden_size weights per layer) and Qwen3's q/k norms are not counted.
* GPT-2: ``n_layer``, ``n_embd``, ``n_head``, ``n_inner`` (default 4 x n_embd), learned positions,
  LayerNorm, GELU, biases, tied embeddings.
* DeepSeek-V2/V3: multi-head latent attention (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
  ``qk_rope_head_dim``, ``v_head_dim``), ``n_routed_experts`` of width ``moe_intermediate_size``,
  ``n_shared_experts``, ``first_k_dense_replace`` dense layers, ``moe_layer_freq``. The multi-token
  prediction module (``num_nextn_predict_layers``) is not part of the model counted (671B for V3).

>>> m = model_from_hf_config({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
...     "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
...     "max_position_embeddings": 256}, "tiny")
>>> (m.activation, m.norm, m.kv_heads, m.tied_embeddings)
('swiglu', 'rmsnorm', 4, False)
"""
from __future__ import annotations

from typing import Any, Callable

from pydantic import ValidationError

from ..errors import SpecError
from .model import MLASpec, ModelSpec

_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "GPT2LMHeadModel": "gpt2",
    "GPT2Model": "gpt2",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
}

_GELU = {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate", "quick_gelu",
         "gelu_10"}
_SILU = {"silu", "swish"}
_RELU = {"relu"}


def _fail(key: str, problem: str, fix: str) -> SpecError:
    return SpecError(f"model.{key}", problem, fix)


def _int(data: dict, key: str, *, default: Any = ..., minimum: int = 1, fix: str = "") -> Any:
    """An integer field of config.json; ``default=...`` makes it required."""
    value = data.get(key)
    if value is None:
        if default is ...:
            raise _fail(key, "missing in config.json",
                        fix or f'add "{key}": <integer> (copy it from the model\'s config.json on the Hub)')
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(key, f"expected an integer, got {_short(value)}", f'write "{key}" as a whole number')
    if value < minimum:
        raise _fail(key, f"{value} must be at least {minimum}", "check the value in config.json")
    if value > _MAX_INT:
        raise _fail(key, f"{_short(value)} is implausibly large", "check the value in config.json")
    return value


_MAX_INT = 10**12


def _bool(data: dict, key: str, default: bool) -> bool:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _fail(key, f"expected true or false, got {_short(value)}", f'write "{key}": true or false')
    return value


def _short(value: object, limit: int = 40) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _activation(data: dict, key: str, default: str, gated: bool) -> str:
    raw = data.get(key, default)
    if raw is None:
        raw = default
    if not isinstance(raw, str):
        raise _fail(key, f"expected an activation name, got {_short(raw)}", 'e.g. "silu" or "gelu_new"')
    act = raw.strip().lower()
    if gated:
        # Llama-style MLPs are always gated: down(act(gate(x)) * up(x)). SwiGLU for silu; a gated GELU
        # (GeGLU) has the same shapes and FLOPs, so it is priced as the gated activation too.
        if act in _SILU or act in _GELU:
            return "swiglu"
    else:
        if act in _GELU:
            return "gelu"
        if act in _RELU:
            return "relu"
        if act in _SILU:
            raise _fail(key, f"{raw!r} without a gated MLP is not modelled", "only gelu/relu plain MLPs are supported")
    raise _fail(key, f"unsupported activation {raw!r}", 'use "silu" (gated MLP) or a "gelu" variant')


def _model_type(data: dict) -> str:
    mt = data.get("model_type")
    if isinstance(mt, str) and mt.strip():
        return mt.strip().lower()
    if mt is not None:
        raise _fail("model_type", f"expected a string, got {_short(mt)}", f"use one of {', '.join(sorted(_BUILDERS))}")
    archs = data.get("architectures")
    if isinstance(archs, str):
        archs = [archs]
    if isinstance(archs, list):
        for a in archs:
            if isinstance(a, str) and a in _ARCHITECTURES:
                return _ARCHITECTURES[a]
        shown = ", ".join(_short(a) for a in archs[:3]) or "[]"
        raise _fail("architectures", f"unsupported architecture {shown}",
                    f"add \"model_type\" (one of {', '.join(sorted(_BUILDERS))}) or write a clustertwin model YAML")
    raise _fail("model_type", "missing in config.json",
                f"add \"model_type\" (one of {', '.join(sorted(_BUILDERS))})")


def _moe_layer_pattern(layers: list[bool], key: str) -> tuple[int, int]:
    """(moe_first_dense_layers, moe_layer_freq) reproducing exactly which layers are MoE."""
    moe = [i for i, is_moe in enumerate(layers) if is_moe]
    first = moe[0]
    freq = moe[1] - moe[0] if len(moe) > 1 else len(layers)
    if moe != list(range(first, len(layers), freq)):
        raise _fail(key, f"MoE layers {moe[:8]}{'...' if len(moe) > 8 else ''} are not leading dense layers "
                         "then every k-th layer",
                    "clustertwin models k leading dense layers then every k-th layer MoE; "
                    "write a model YAML with the nearest pattern")
    return first, freq


# ---- families ------------------------------------------------------------------------------------

def _common(data: dict) -> dict:
    """Fields shared by the Llama-like decoders (Llama, Mistral, Mixtral, Qwen, DeepSeek)."""
    heads = _int(data, "num_attention_heads")
    out = dict(
        num_layers=_int(data, "num_hidden_layers"),
        hidden_size=_int(data, "hidden_size"),
        num_heads=heads,
        num_kv_heads=_int(data, "num_key_value_heads", default=None),
        ffn_hidden_size=_int(data, "intermediate_size"),
        vocab_size=_int(data, "vocab_size"),
        max_seq_len=_int(data, "max_position_embeddings"),
        activation=_activation(data, "hidden_act", "silu", gated=True),
        norm="rmsnorm",
        positions="rope",
        tied_embeddings=_bool(data, "tie_word_embeddings", False),
    )
    head_dim = _int(data, "head_dim", default=None)
    if head_dim is not None:
        out["head_dim"] = head_dim
    return out


def _llama(data: dict) -> dict:
    out = _common(data)
    attn_bias = _bool(data, "attention_bias", False)
    mlp_bias = _bool(data, "mlp_bias", False)
    out["bias"] = mlp_bias
    out["qkv_bias"] = attn_bias
    return out


def _mistral(data: dict) -> dict:
    out = _common(data)
    out.update(bias=False)
    return out


def _mixtral(data: dict) -> dict:
    out = _mistral(data)
    experts = _int(data, "num_local_experts")
    out.update(moe_num_experts=experts, moe_top_k=_int(data, "num_experts_per_tok"))
    return out


def _qwen2(data: dict) -> dict:
    out = _common(data)
    out.update(bias=False, qkv_bias=True)  # Qwen2: biases on q, k, v projections only
    return out


def _qwen3(data: dict) -> dict:
    out = _common(data)
    out.update(bias=False, qkv_bias=_bool(data, "attention_bias", False))
    return out


def _qwen_moe(data: dict, shared: bool) -> dict:
    out = _qwen2(data) if shared else _qwen3(data)
    experts = _int(data, "num_experts", default=0, minimum=0)
    if not experts:
        return out
    n = out["num_layers"]
    step = _int(data, "decoder_sparse_step", default=1)
    dense_only = data.get("mlp_only_layers") or []
    if not isinstance(dense_only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense_only):
        raise _fail("mlp_only_layers", f"expected a list of layer indices, got {_short(dense_only)}",
                    "write e.g. [0, 1] or []")
    # transformers' Qwen2MoeDecoderLayer: MoE where layer not in mlp_only_layers and (layer + 1) % step == 0
    layers = [i not in dense_only and (i + 1) % step == 0 for i in range(n)]
    if not any(layers):
        return out  # every layer dense
    first, freq = _moe_layer_pattern(layers, "mlp_only_layers" if dense_only else "decoder_sparse_step")
    out.update(
        moe_num_experts=experts,
        moe_top_k=_int(data, "num_experts_per_tok"),
        moe_ffn_hidden_size=_int(data, "moe_intermediate_size"),
        moe_first_dense_layers=first,
        moe_layer_freq=freq,
    )
    if shared:
        width = _int(data, "shared_expert_intermediate_size", default=0, minimum=0)
        if width:
            out.update(moe_num_shared_experts=1, moe_shared_ffn_hidden_size=width)
    return out


def _deepseek(data: dict) -> dict:
    out = _common(data)
    out.pop("head_dim", None)  # MLA defines the head dims
    if _bool(data, "attention_bias", False):
        raise _fail("attention_bias", "true is not modelled for multi-head latent attention", "set it to false")
    out["bias"] = False
    out["mla"] = MLASpec(
        q_lora_rank=_int(data, "q_lora_rank", default=None),
        kv_lora_rank=_int(data, "kv_lora_rank"),
        qk_nope_head_dim=_int(data, "qk_nope_head_dim"),
        qk_rope_head_dim=_int(data, "qk_rope_head_dim"),
        v_head_dim=_int(data, "v_head_dim"),
    )
    experts = _int(data, "n_routed_experts", default=0, minimum=0)
    if not experts:
        return out
    n = out["num_layers"]
    first_dense = _int(data, "first_k_dense_replace", default=0, minimum=0)
    freq = _int(data, "moe_layer_freq", default=1)
    # DeepSeek's modeling code: MoE where layer >= first_k_dense_replace and layer % moe_layer_freq == 0
    layers = [i >= first_dense and i % freq == 0 for i in range(n)]
    if not any(layers):
        raise _fail("first_k_dense_replace", f"{first_dense} leaves no MoE layer of {n}",
                    f"use fewer than num_hidden_layers={n} or drop n_routed_experts")
    first, freq = _moe_layer_pattern(layers, "moe_layer_freq")
    out.update(
        moe_num_experts=experts,
        moe_top_k=_int(data, "num_experts_per_tok"),
        moe_ffn_hidden_size=_int(data, "moe_intermediate_size"),
        moe_num_shared_experts=_int(data, "n_shared_experts", default=0, minimum=0),
        moe_first_dense_layers=first,
        moe_layer_freq=freq,
    )
    groups = _int(data, "n_group", default=0, minimum=0)
    if groups > 1:  # group-limited routing (DeepSeek-V3: 8 groups, top 4)
        out.update(moe_expert_groups=groups, moe_topk_groups=_int(data, "topk_group", default=groups))
    mtp = _int(data, "num_nextn_predict_layers", default=0, minimum=0)
    if mtp:   # DeepSeek-V3's multi-token-prediction modules (modeling_deepseek: the layers after num_hidden_layers)
        out["mtp_depth"] = mtp
    return out


def _gpt2(data: dict) -> dict:
    hidden = _int(data, "n_embd")
    inner = _int(data, "n_inner", default=None)
    return dict(
        num_layers=_int(data, "n_layer"),
        hidden_size=hidden,
        num_heads=_int(data, "n_head"),
        ffn_hidden_size=inner if inner is not None else 4 * hidden,
        vocab_size=_int(data, "vocab_size"),
        max_seq_len=_int(data, "n_positions", default=None) or _int(data, "n_ctx"),
        activation=_activation(data, "activation_function", "gelu_new", gated=False),
        norm="layernorm",
        positions="learned",
        bias=True,
        tied_embeddings=_bool(data, "tie_word_embeddings", True),
    )


_BUILDERS: dict[str, Callable[[dict], dict]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": lambda d: _qwen_moe(d, shared=True),
    "qwen3": _qwen3,
    "qwen3_moe": lambda d: _qwen_moe(d, shared=False),
    "gpt2": _gpt2,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
}

_FAMILY = {"mistral": "mistral", "mixtral": "mixtral", "qwen2_moe": "qwen2", "qwen3_moe": "qwen3",
           "deepseek_v2": "deepseek", "deepseek_v3": "deepseek"}


def model_from_hf_config(data: dict, name: str = "") -> ModelSpec:
    """A ModelSpec from the parsed contents of a Hugging Face ``config.json``.

    Raises SpecError (one line naming the config.json key and the fix) for an unknown
    ``model_type``, a missing or malformed key, or dimensions that do not make a valid model.
    """
    if not isinstance(data, dict):
        raise SpecError("model", f"config.json holds {type(data).__name__}, not a mapping of fields",
                        "give the model's config.json (a JSON object)")
    model_type = _model_type(data)
    builder = _BUILDERS.get(model_type)
    if builder is None:
        raise _fail("model_type", f"unsupported model_type {model_type!r}",
                    f"use one of {', '.join(sorted(_BUILDERS))}, or write a clustertwin model YAML")
    fields = builder(data)
    origin = data.get("_name_or_path")
    label = name or (origin if isinstance(origin, str) and origin else model_type)
    source = "Hugging Face config.json" + (f" ({origin})" if isinstance(origin, str) and origin else "")
    keys = _GPT2_KEYS if model_type == "gpt2" else _KEYS
    try:
        return ModelSpec(name=label, family=_FAMILY.get(model_type, model_type), source=source, **fields)
    except ValidationError as e:
        from .plan import first_error
        field, problem, fix = first_error(e, "model")
    except SpecError as e:  # ModelSpec's own consistency checks (heads, experts)
        field, problem, fix = e.field, e.problem, e.fix
    # name the config.json key the user can edit, not ModelSpec's field
    leaf = field.split(".")[-1]
    hf_key = keys.get(leaf)
    if hf_key is None and leaf.startswith("moe_"):
        hf_key = {"qwen2_moe": "num_experts", "qwen3_moe": "num_experts", "mixtral": "num_local_experts"}.get(
            model_type, "n_routed_experts") if leaf == "moe_num_experts" else None
    raise SpecError(f"model.{hf_key}" if hf_key else field if field.startswith("model") else f"model.{field}",
                    problem, fix) from None


_KEYS = {
    "num_layers": "num_hidden_layers", "hidden_size": "hidden_size", "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim", "ffn_hidden_size": "intermediate_size",
    "vocab_size": "vocab_size", "max_seq_len": "max_position_embeddings", "moe_top_k": "num_experts_per_tok",
    "moe_ffn_hidden_size": "moe_intermediate_size", "moe_first_dense_layers": "first_k_dense_replace",
    "moe_expert_groups": "n_group", "moe_topk_groups": "topk_group", "mtp_depth": "num_nextn_predict_layers",
}
_GPT2_KEYS = {
    "num_layers": "n_layer", "hidden_size": "n_embd", "num_heads": "n_head", "ffn_hidden_size": "n_inner",
    "vocab_size": "vocab_size", "max_seq_len": "n_positions",
}
