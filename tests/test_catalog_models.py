"""The model presets of the catalog: counts against published figures, Megatron FLOPs against Narayanan et al.,
forgiving names, and sourcing discipline (a source for every file, a comment on every number)."""
from __future__ import annotations

import re

import pytest
import yaml

from clustertwin.catalog import CATALOG_DIR, _squash, load_model, normalize, preset_names, resolve_preset

MODELS_DIR = CATALOG_DIR / "models"
PRESETS = preset_names("models")
COUNT_KEYS = ("params_total", "params_active", "params_non_embedding")


def raw(name: str) -> dict:
    return yaml.safe_load((MODELS_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


def published(name: str) -> dict[str, float]:
    # float(): PyYAML reads '8.03e9' (no sign in the exponent) as a string, so coerce.
    return {k: float(v) for k, v in (raw(name).get("published") or {}).items()}


PUBLISHED_CASES = [(n, k) for n in PRESETS for k in published(n)]

# Published figures that are coarser than 1%, each with the tolerance its printed precision allows.
# Value: (absolute tolerance, why). Everything else must match within 1%.
ROUNDED = {
    # Brown et al. Table 2.1 prints sizes to two significant figures: "1.3B" covers 1.25-1.35B, "2.7B" 2.65-2.75B.
    ("gpt3-1.3b", "params_total"): (0.05e9, "Table 2.1 prints 1.3B (2 significant figures); layout counts 1.316B"),
    ("gpt3-2.7b", "params_total"): (0.05e9, "Table 2.1 prints 2.7B (2 significant figures); layout counts 2.652B"),
    # "350M" is a nominal label: the same layout as GPT-2 medium (355M, checked to 1% in gpt2-350m) plus 1M more
    # positions (2048 instead of 1024) comes to 355.9M.
    ("gpt3-350m", "params_total"): (7e6, "nominal '350M'; GPT-2 medium layout with 2048 positions is 355.9M"),
    # Table 2.1 prints d_model 5140, which 40 heads of 128 cannot fill; the preset uses 5120 (12.85B). The paper's
    # 13.0B follows from 5140 (see test_gpt3_13b_published_count_follows_from_5140).
    ("gpt3-13b", "params_total"): (0.2e9, "d_model 5140 in Table 2.1 read as 5120; 13.0B was computed with 5140"),
    # Narayanan et al. Table 1 prints billions to one decimal: "1.7" covers 1.65-1.75, "3.6" covers 3.55-3.65.
    ("megatron-1.7b", "params_total"): (0.05e9, "Table 1 prints 1.7 (one decimal, in billions); formula gives 1.652B"),
    ("megatron-3.6b", "params_total"): (0.05e9, "Table 1 prints 3.6 (one decimal, in billions); formula gives 3.562B"),
    # DeepSeek's "37B activated" rounds its own count of 36.6B, which leaves out the input embedding lookup
    # (README_WEIGHTS.md: 36.6B including the 0.9B output head). Our params_active includes the 0.93B input
    # embedding, hence 37.55B; test_deepseek_v3_active_matches_deepseek_definition checks 36.6B to 1%.
    ("deepseek-v3", "params_active"): (0.6e9, "'37B' rounds 36.6B, which excludes the 0.93B input embedding"),
    # Qwen3-30B-A3B model card: "3.3B activated" (two significant figures). The layout counts 3.353B with both
    # embeddings and the 12.6M router weights; without the router it is 3.340B, which does print as 3.3B.
    ("qwen3-30b-a3b", "params_active"): (0.06e9, "'3.3B' (2 significant figures); layout counts 3.353B incl. router"),
    # xAI gives no active count for Grok-1, only "25% of the weights active on a given token" (of 314B = 78.5B).
    # Read as a fraction quoted to the nearest 5% (22.5-27.5% = 70.7-86.4B); the layout gives 83.8B, 26.5%.
    ("grok-1", "params_active"): (7.85e9, "'25% of the weights' is a round fraction; layout counts 83.8B (26.5%)"),
    # Kimi K2 model card prints "1T" and "32B" (headline figures). The layout counts 1.026T total, and 32.86B active
    # with both embeddings (31.69B without the 1.17B input embedding, DeepSeek's convention; see deepseek-v3).
    ("kimi-k2", "params_total"): (0.05e12, "model card prints '1T'; layout counts 1.026T"),
    ("kimi-k2", "params_active"): (0.9e9, "model card prints '32B'; layout counts 32.86B (31.69B w/o input embedding)"),
    # Nemotron-3 8B and NeMo's Nemotron 22B are named by a nominal size only (model names nemotron3-8B and
    # nemotron3-22B of the NeMo-Framework-Launcher configs): the layouts count 8.54B (6.44B non-embedding + 2.10B
    # untied 256K-token embeddings) and 21.27B (18.12B + 3.15B).
    ("nemotron-3-8b", "params_total"): (0.6e9, "nominal '8B'; layout counts 8.54B incl. 2.10B embeddings"),
    ("nemotron-22b", "params_total"): (0.8e9, "nominal '22B'; layout counts 21.27B incl. 3.15B embeddings"),
}


def test_presets_exist():
    required = {
        "gpt2-124m", "gpt2-350m",
        "gpt3-125m", "gpt3-350m", "gpt3-760m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b",
        "megatron-1.7b", "megatron-3.6b", "megatron-7.5b", "megatron-18.4b", "megatron-39.1b", "megatron-76.1b",
        "megatron-145.6b", "megatron-310.1b", "megatron-529.6b", "megatron-1t",
        "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-405b",
        "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-72b", "deepseek-v3",
        "qwen3-30b-a3b", "qwen3-235b-a22b", "grok-1", "kimi-k2",
        "nemotron-4-15b", "nemotron-4-340b",
    }
    assert required <= set(PRESETS), sorted(required - set(PRESETS))


@pytest.mark.parametrize("name,key", PUBLISHED_CASES, ids=[f"{n}:{k}" for n, k in PUBLISHED_CASES])
def test_count_matches_published(name, key):
    assert key in COUNT_KEYS, f"{name}: published key {key!r} is not a ModelSpec count"
    m = load_model(name)
    computed, want = getattr(m, key), published(name)[key]
    if (name, key) in ROUNDED:
        tol, why = ROUNDED[(name, key)]
        assert abs(computed - want) <= tol, f"{name} {key}: {computed:.4g} vs {want:.4g} ({why})"
    else:
        assert computed == pytest.approx(want, rel=0.01), f"{name} {key}: {computed:.4g} vs published {want:.4g}"


@pytest.mark.parametrize("name", PRESETS)
def test_published_block_is_complete(name):
    m = load_model(name)
    pub = published(name)
    assert "params_total" in pub, f"{name}: no published params_total"
    if m.is_moe:
        assert "params_active" in pub, f"{name}: MoE preset without published params_active"
        assert m.params_active < m.params_total
    else:
        assert m.params_active == m.params_total


def test_rounding_exceptions_are_needed():
    """Every loosened tolerance must actually be needed (so stale exceptions are noticed)."""
    for (name, key), _ in ROUNDED.items():
        computed, want = getattr(load_model(name), key), published(name)[key]
        assert abs(computed / want - 1) > 0.01, f"{name} {key} now matches within 1%: drop it from ROUNDED"


def test_gpt3_175b_count():
    assert load_model("gpt3-175b").params_total == pytest.approx(174.6e9, rel=0.01)


def test_llama31_405b_count():
    assert load_model("llama3.1-405b").params_total == pytest.approx(405.9e9, rel=0.01)


def test_gpt3_13b_published_count_follows_from_5140():
    m = load_model("gpt3-13b")
    as_printed = m.model_copy(update={"hidden_size": 5140, "ffn_hidden_size": 4 * 5140})
    assert as_printed.params_total == pytest.approx(13.0e9, rel=0.01)


def test_deepseek_v3_active_matches_deepseek_definition():
    m = load_model("deepseek-v3")
    input_embedding = m.vocab_size * m.hidden_size
    assert m.params_active - input_embedding == pytest.approx(36.6e9, rel=0.01)
    assert m.vocab_size * m.hidden_size == pytest.approx(0.9e9, rel=0.05)  # "0.9B for the output Head"


# ---- Megatron scaling series: FLOPs against Narayanan et al. (SC21), Sec. 5.1 --------------------------------
MEGATRON = [n for n in PRESETS if n.startswith("megatron-")]
# Table 1: batch size B (sequences) per row, used only to state the formula in its published form.
MEGATRON_BATCH = {"megatron-1.7b": 512, "megatron-3.6b": 512, "megatron-7.5b": 512, "megatron-18.4b": 1024,
                  "megatron-39.1b": 1536, "megatron-76.1b": 1792, "megatron-145.6b": 2304,
                  "megatron-310.1b": 2160, "megatron-529.6b": 2520, "megatron-1t": 3072}


def test_megatron_series_complete():
    assert sorted(MEGATRON) == sorted(MEGATRON_BATCH)


@pytest.mark.parametrize("name", MEGATRON)
def test_megatron_flops_match_narayanan(name):
    """Per iteration, no recomputation: F = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)), biases and norms ignored."""
    m = load_model(name)
    B, s, l, h, V = MEGATRON_BATCH[name], 2048, m.num_layers, m.hidden_size, m.vocab_size
    assert (s, V, m.ffn_hidden_size) == (m.max_seq_len, 51200, 4 * h)
    narayanan = 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))
    ours = m.flops_per_token(s) * B * s
    assert ours == pytest.approx(narayanan, rel=0.01)


@pytest.mark.parametrize("name", MEGATRON)
def test_megatron_params_match_narayanan_formula(name):
    """P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)), the paper's parameter count (Sec. 5.1)."""
    m = load_model(name)
    l, h, V, s = m.num_layers, m.hidden_size, m.vocab_size, m.max_seq_len
    formula = 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    # Exact but for the final LayerNorm (2h), which the formula leaves out.
    assert m.params_total - formula == pytest.approx(2 * h, abs=1)


# ---- names ---------------------------------------------------------------------------------------------------
def _names(name: str) -> list[str]:
    data = raw(name)
    return [name, str(data["name"]), *map(str, data.get("aliases") or [])]


@pytest.mark.parametrize("name", PRESETS)
def test_loads_by_name_alias_and_variations(name):
    data = raw(name)
    assert data["name"] == name, "the file stem must be the canonical name"
    assert data.get("aliases"), f"{name}: give at least one alias"
    expect = load_model(name)
    variants = [
        name.upper(),
        name.upper().replace("-", "_"),
        name.replace("-", " ").title(),
        f"  {name}  ",
        data["aliases"][0],
        data["aliases"][0].upper().replace("-", "_"),
    ]
    for v in variants:
        assert load_model(v) == expect, f"{v!r} did not load {name}"


def test_names_and_aliases_do_not_collide():
    owner: dict[str, str] = {}
    for name in PRESETS:
        for n in _names(name):
            for key in (normalize(n), _squash(n)):
                assert owner.setdefault(key, name) == name, f"{n!r} of {name} collides with {owner[key]}"
            assert resolve_preset("models", n, "model").stem == name


# ---- sourcing discipline ---------------------------------------------------------------------------------------
NUMBER_LINE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*:\s*[-+]?[0-9][0-9_.]*([eE][-+]?[0-9]+)?\s*(#.*)?$")


@pytest.mark.parametrize("name", PRESETS)
def test_file_has_source_and_header(name):
    text = (MODELS_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    assert text.startswith("# "), f"{name}: first line must be a comment naming the source"
    data = raw(name)
    assert str(data.get("source", "")).strip(), f"{name}: empty source"
    assert str(data.get("family", "")).strip(), f"{name}: empty family"


@pytest.mark.parametrize("name", PRESETS)
def test_every_number_carries_a_comment(name):
    lines = (MODELS_DIR / f"{name}.yaml").read_text(encoding="utf-8").splitlines()
    numeric = [ln for ln in lines if NUMBER_LINE.match(ln)]
    assert len(numeric) >= 6, f"{name}: expected numeric dimension lines"
    bare = [ln for ln in numeric if not re.search(r"#\s*\S", ln)]
    assert not bare, f"{name}: numbers without a source comment: {bare}"
