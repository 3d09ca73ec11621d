"""Hugging Face config.json -> ModelSpec: published parameter counts, and one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from clustertwin.catalog import load_model
from clustertwin.errors import ClusterTwinError, DataError, SpecError
from clustertwin.specs.hf import model_from_hf_config

HF = Path(__file__).parent / "data" / "hf"

# (fixture, published total, published active or None, source of the figure)
PUBLISHED = [
    ("meta-llama-3-8b.json", 8.03e9, None),           # HF model card: 8.03B
    ("mistral-7b-v0.1.json", 7.24e9, None),           # HF model card: 7.24B
    ("mixtral-8x7b-v0.1.json", 46.7e9, 12.9e9),       # Mistral blog: 46.7B total, 12.9B per token
    ("qwen2.5-7b.json", 7.62e9, None),                # Qwen2.5 card: 7.61B (7.62B on the Hub)
    ("gpt2.json", 124.4e6, None),                     # 124,439,808 with tied head, learned positions
    ("deepseek-v3.json", 671e9, None),                # DeepSeek-V3 report: 671B total (MTP module excluded)
    ("qwen1.5-moe-a2.7b.json", 14.3e9, 2.7e9),        # Qwen1.5-MoE card: 14.3B total, 2.7B activated
]


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


@pytest.mark.parametrize("fixture,total,active", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_published_parameter_counts(fixture: str, total: float, active: float | None) -> None:
    m = load_model(HF / fixture)
    assert _rel(m.params_total, total) < 0.01, (fixture, m.params_total)
    if active is not None:
        assert _rel(m.params_active, active) < 0.01, (fixture, m.params_active)
    else:
        assert m.params_active <= m.params_total
    assert m.source.startswith("Hugging Face config.json")


def test_load_model_accepts_str_path() -> None:
    assert load_model(str(HF / "gpt2.json")).params_total == 124_439_808


def test_gpt2_exact() -> None:
    m = load_model(HF / "gpt2.json")
    assert (m.num_layers, m.hidden_size, m.num_heads, m.ffn_hidden_size) == (12, 768, 12, 3072)
    assert (m.activation, m.norm, m.positions, m.bias, m.tied_embeddings) == ("gelu", "layernorm", "learned", True, True)
    assert m.max_seq_len == 1024
    assert m.params_total == 124_439_808  # the well-known exact count


def test_gpt2_n_inner_respected() -> None:
    data = json.loads((HF / "gpt2.json").read_text())
    assert model_from_hf_config({**data, "n_inner": 1000}, "x").ffn_hidden_size == 1000
    assert model_from_hf_config({**data, "n_inner": None}, "x").ffn_hidden_size == 3072


def test_llama3_matches_catalog_preset() -> None:
    hf = load_model(HF / "meta-llama-3-8b.json")
    preset = load_model("llama3-8b")
    for f in ("num_layers", "hidden_size", "num_heads", "kv_heads", "ffn_hidden_size", "vocab_size", "max_seq_len",
              "activation", "norm", "positions", "bias", "tied_embeddings"):
        assert getattr(hf, f) == getattr(preset, f), f
    assert hf.params_total == preset.params_total == 8_030_261_248
    assert hf.flops_per_token(4096) == preset.flops_per_token(4096)


def test_qwen2_qkv_bias_only() -> None:
    m = load_model(HF / "qwen2.5-7b.json")
    assert (m.bias, m.qkv_bias, m.kv_heads, m.tied_embeddings) == (False, True, 4, False)
    tied = model_from_hf_config({**json.loads((HF / "qwen2.5-7b.json").read_text()), "tie_word_embeddings": True}, "t")
    assert m.params_total - tied.params_total == 152064 * 3584


def test_mixtral_experts() -> None:
    m = load_model(HF / "mixtral-8x7b-v0.1.json")
    assert (m.moe_num_experts, m.moe_top_k, m.expert_ffn, m.num_moe_layers) == (8, 2, 14336, 32)


def test_deepseek_v3_mla_and_moe() -> None:
    m = load_model(HF / "deepseek-v3.json")
    assert m.mla is not None
    assert (m.mla.q_lora_rank, m.mla.kv_lora_rank, m.mla.qk_nope_head_dim, m.mla.qk_rope_head_dim,
            m.mla.v_head_dim) == (1536, 512, 128, 64, 128)
    assert (m.moe_num_experts, m.moe_top_k, m.expert_ffn, m.moe_num_shared_experts) == (256, 8, 2048, 1)
    assert (m.moe_first_dense_layers, m.num_moe_layers, m.ffn_hidden_size) == (3, 58, 18432)
    assert (m.moe_expert_groups, m.moe_topk_groups) == (8, 4)     # group-limited routing: n_group, topk_group
    # "37B activated" (report, rounded); DeepSeek's README gives 36.6B counting the output head but
    # not the input embedding.
    assert _rel(m.params_active, 37e9) < 0.02
    assert _rel(m.params_active - m.vocab_size * m.hidden_size, 36.6e9) < 0.01


def test_qwen_moe_shared_expert() -> None:
    m = load_model(HF / "qwen1.5-moe-a2.7b.json")
    assert (m.moe_num_experts, m.moe_top_k, m.expert_ffn) == (60, 4, 1408)
    assert (m.moe_num_shared_experts, m.shared_ffn, m.num_moe_layers, m.qkv_bias, m.bias) == (1, 5632, 24, True, False)


BASE_QMOE = json.loads((HF / "qwen1.5-moe-a2.7b.json").read_text())


@pytest.mark.parametrize("step,dense,first,freq,n_moe", [
    (1, [], 0, 1, 24),
    (2, [], 1, 2, 12),       # transformers: MoE where (layer + 1) % step == 0 -> layers 1, 3, 5, ...
    (4, [], 3, 4, 6),
    (1, [0, 1], 2, 1, 22),   # leading dense layers
    (2, [1], 3, 2, 11),
])
def test_qwen_moe_layer_patterns(step: int, dense: list[int], first: int, freq: int, n_moe: int) -> None:
    m = model_from_hf_config({**BASE_QMOE, "decoder_sparse_step": step, "mlp_only_layers": dense}, "q")
    assert (m.moe_first_dense_layers, m.moe_layer_freq, m.num_moe_layers) == (first, freq, n_moe)
    expected = [i not in dense and (i + 1) % step == 0 for i in range(m.num_layers)]
    assert [m.is_moe_layer(i) for i in range(m.num_layers)] == expected


def test_qwen_moe_unrepresentable_pattern() -> None:
    with pytest.raises(SpecError) as e:
        model_from_hf_config({**BASE_QMOE, "mlp_only_layers": [5]}, "q")
    assert e.value.field == "model.mlp_only_layers"
    assert "\n" not in str(e.value)


def test_qwen_moe_all_dense() -> None:
    m = model_from_hf_config({**BASE_QMOE, "mlp_only_layers": list(range(24))}, "q")
    assert not m.is_moe and m.ffn_hidden_size == 5632


def test_head_dim_respected() -> None:
    # Mistral-NeMo-12B: hidden 5120 but 32 heads of 128 (q projection 4096 wide)
    nemo = dict(model_type="mistral", hidden_size=5120, intermediate_size=14336, num_hidden_layers=40,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=131072,
                max_position_embeddings=1024000, hidden_act="silu", tie_word_embeddings=False)
    m = model_from_hf_config(nemo, "mistral-nemo")
    assert m.qk_head_dim == 128
    assert _rel(m.params_total, 12.25e9) < 0.01
    without = model_from_hf_config({**nemo, "head_dim": None}, "x")
    assert without.qk_head_dim == 160


def test_deepseek_v2_lite_without_q_lora() -> None:
    v2l = dict(architectures=["DeepseekV2ForCausalLM"], hidden_size=2048, num_hidden_layers=27,
               num_attention_heads=16, num_key_value_heads=16, kv_lora_rank=512, q_lora_rank=None,
               qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, intermediate_size=10944,
               moe_intermediate_size=1408, n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6,
               first_k_dense_replace=1, moe_layer_freq=1, vocab_size=102400, max_position_embeddings=163840,
               hidden_act="silu", tie_word_embeddings=False)
    m = model_from_hf_config(v2l, "deepseek-v2-lite")
    assert m.mla is not None and m.mla.q_lora_rank is None
    assert _rel(m.params_total, 15.7e9) < 0.01  # DeepSeek-V2-Lite card: 15.7B total


def test_architectures_without_model_type() -> None:
    data = json.loads((HF / "mistral-7b-v0.1.json").read_text())
    del data["model_type"]
    assert model_from_hf_config(data, "m").params_total == load_model(HF / "mistral-7b-v0.1.json").params_total


def test_name_and_family() -> None:
    m = model_from_hf_config(json.loads((HF / "mixtral-8x7b-v0.1.json").read_text()), "mixtral")
    assert (m.name, m.family) == ("mixtral", "mixtral")
    assert "mistralai/Mixtral-8x7B-v0.1" in m.source
    # no name given: the Hub id from _name_or_path
    assert model_from_hf_config(json.loads((HF / "gpt2.json").read_text()), "").name == "gpt2"


# ---- errors ---------------------------------------------------------------------------------------

def _one_line(e: ClusterTwinError) -> str:
    text = str(e)
    assert "\n" not in text and text == e.one_line()
    return text


def test_unknown_model_type(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "mamba", "hidden_size": 768}))
    with pytest.raises(SpecError) as e:
        load_model(p)
    assert e.value.field == "model.model_type"
    text = _one_line(e.value)
    assert "mamba" in text and "llama" in text  # names the value and the supported ones


def test_unknown_architecture() -> None:
    with pytest.raises(SpecError) as e:
        model_from_hf_config({"architectures": ["FalconForCausalLM"]}, "f")
    assert e.value.field == "model.architectures"
    assert "FalconForCausalLM" in _one_line(e.value)


@pytest.mark.parametrize("fixture,key", [
    ("meta-llama-3-8b.json", "num_hidden_layers"),
    ("meta-llama-3-8b.json", "hidden_size"),
    ("meta-llama-3-8b.json", "vocab_size"),
    ("meta-llama-3-8b.json", "intermediate_size"),
    ("meta-llama-3-8b.json", "max_position_embeddings"),
    ("gpt2.json", "n_layer"),
    ("gpt2.json", "n_embd"),
    ("mixtral-8x7b-v0.1.json", "num_experts_per_tok"),
    ("deepseek-v3.json", "kv_lora_rank"),
    ("deepseek-v3.json", "moe_intermediate_size"),
    ("qwen1.5-moe-a2.7b.json", "moe_intermediate_size"),
])
def test_missing_key(tmp_path: Path, fixture: str, key: str) -> None:
    data = json.loads((HF / fixture).read_text())
    del data[key]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    with pytest.raises(SpecError) as e:
        load_model(p)
    assert e.value.field == f"model.{key}"
    text = _one_line(e.value)
    assert "missing" in text and key in text


@pytest.mark.parametrize("key,value", [
    ("num_hidden_layers", "32"), ("num_hidden_layers", 0), ("num_hidden_layers", -1), ("num_hidden_layers", True),
    ("hidden_size", 4096.5), ("num_key_value_heads", [8]), ("tie_word_embeddings", "no"), ("hidden_act", "tanh"),
    ("hidden_act", 3), ("num_hidden_layers", 20000), ("hidden_size", 10**5000), ("vocab_size", 10**400),
], ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_malformed_value(key: str, value: object) -> None:
    data = {**json.loads((HF / "meta-llama-3-8b.json").read_text()), key: value}
    with pytest.raises(SpecError) as e:
        model_from_hf_config(data, "x")
    assert e.value.field == f"model.{key}"
    _one_line(e.value)


def test_inconsistent_dimensions_name_the_hf_key() -> None:
    data = {**json.loads((HF / "meta-llama-3-8b.json").read_text()), "num_key_value_heads": 7}
    with pytest.raises(SpecError) as e:
        model_from_hf_config(data, "x")
    assert e.value.field == "model.num_key_value_heads"
    data = {**json.loads((HF / "mixtral-8x7b-v0.1.json").read_text()), "num_experts_per_tok": 9}
    with pytest.raises(SpecError) as e:
        model_from_hf_config(data, "x")
    assert e.value.field == "model.num_experts_per_tok"


def test_integral_floats_accepted() -> None:
    data = {**json.loads((HF / "meta-llama-3-8b.json").read_text()), "hidden_size": 4096.0}
    assert model_from_hf_config(data, "x").hidden_size == 4096


def test_not_a_mapping() -> None:
    with pytest.raises(SpecError):
        model_from_hf_config(["model_type", "llama"], "x")  # type: ignore[arg-type]


def test_malformed_json(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama",\n "hidden_size": 4096,,}')
    with pytest.raises(DataError) as e:
        load_model(p)
    assert e.value.field == "model"
    text = _one_line(e.value)
    assert "malformed JSON" in text and "line 2" in text


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError) as e:
        load_model(tmp_path / "nope" / "config.json")
    assert e.value.field == "model"
    assert "not found" in _one_line(e.value)


def test_json_not_an_object(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text("[1, 2, 3]")
    with pytest.raises(DataError):
        load_model(p)


# ---- cross-check with the catalog presets (skipped where a preset is not there) -----------------------

@pytest.mark.parametrize("fixture,preset", [
    ("meta-llama-3-8b.json", "llama3-8b"), ("mistral-7b-v0.1.json", "mistral-7b"),
    ("mixtral-8x7b-v0.1.json", "mixtral-8x7b"), ("qwen2.5-7b.json", "qwen2.5-7b"), ("gpt2.json", "gpt2-124m"),
    ("deepseek-v3.json", "deepseek-v3"), ("qwen1.5-moe-a2.7b.json", "qwen1.5-moe-a2.7b"),
])
def test_agrees_with_catalog_preset(fixture: str, preset: str) -> None:
    try:
        cat = load_model(preset)
    except SpecError:
        pytest.skip(f"no catalog preset {preset}")
    hf = load_model(HF / fixture)
    assert _rel(hf.params_total, cat.params_total) < 1e-3
    assert _rel(hf.params_active, cat.params_active) < 1e-3
    assert _rel(hf.flops_per_token(4096), cat.flops_per_token(4096)) < 1e-3
    assert (hf.moe_expert_groups, hf.moe_topk_groups) == (cat.moe_expert_groups, cat.moe_topk_groups)


# ---- property: any damage to a real config gives a ModelSpec or a one-line SpecError -----------------

FIXTURES = {p.name: json.loads(p.read_text()) for p in sorted(HF.glob("*.json"))}
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**20, max_value=10**20), st.floats(),
              st.text(max_size=8), st.sampled_from([0, 1, 2, 3, 8, 64, "silu", "gelu", "llama", "qwen2_moe"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=5,
)


@settings(max_examples=1000, deadline=None)
@given(name=st.sampled_from(sorted(FIXTURES)), edits=st.lists(
    st.tuples(st.one_of(st.sampled_from(sorted({k for d in FIXTURES.values() for k in d})), st.text(max_size=6)),
              st.one_of(st.just("<delete>"), JSON_VALUES)), min_size=1, max_size=4))
def test_damaged_configs_give_spec_error(name: str, edits: list) -> None:
    data = dict(FIXTURES[name])
    for key, value in edits:
        if value == "<delete>":
            data.pop(key, None)
        else:
            data[key] = value
    try:
        m = model_from_hf_config(data, "fuzz")
    except SpecError as e:
        assert "\n" not in str(e) and e.field.startswith("model")
    else:
        assert m.params_total > 0 and m.params_active <= m.params_total
