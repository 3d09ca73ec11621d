"""Framework stacks: kernels and defaults belong to the framework and its release (issue 16, regime 1).
Each documented release resolves from its name and from family@version; the unversioned names keep
their defaults; docs/model.md shows the table the code holds."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from clustertwin.errors import ClusterTwinError
from clustertwin.specs.framework import (FRAMEWORK_PROFILES, equivalent_release, for_plan, get_framework,
                                         parse_version, resolve_stack, stacks_markdown)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "model.md"
STACKS = ("megatron-deepspeed", "megatron-lm@2021", "megatron-lm@2022", "megatron-core@2024", "nemo@24.07",
          "nemo@24.09", "nemo@25.02", "torchtitan-eager", "torchtitan-compile", "deepspeed-zero3@2021")


@pytest.mark.parametrize("name", STACKS)
def test_every_documented_stack_resolves_by_its_name(name):
    assert get_framework(name).name == name


@pytest.mark.parametrize("spelled, name", [
    ("megatron@2021", "megatron-lm@2021"), ("Megatron-LM@2022", "megatron-lm@2022"),
    ("megatron@2023", "megatron-lm@2022"),          # flash attention was opt-in in plain Megatron-LM in 2023
    ("megatron@2024-12", "megatron-core@2024"), ("megatron@core_r0.8.0", "megatron-core@2024"),
    ("nemo@24.09", "nemo@24.09"), ("nemo@24.11", "nemo@24.09"), ("nemo@25.04.01", "nemo@25.02"),
    ("nemo@24.05", "nemo@24.07"),                   # older than every release: the earliest
    ("deepspeed@2021", "deepspeed-zero3@2021")])
def test_family_at_version_picks_the_latest_release_at_or_before_it(spelled, name):
    assert get_framework(spelled).name == name


def test_nemo_24_07_runs_flash_attention_2_and_later_releases_cudnn_class():
    """NeMo-Framework-Launcher 24.07 exports NVTE_FUSED_ATTN=0 into every job (conf/config.yaml), so Transformer
    Engine 1.8 runs flash-attn 2; from 24.09 the override is gone and TE prefers cuDNN attention on Hopper. The
    releases differ in nothing else."""
    old, new = get_framework("nemo@24.07"), get_framework("nemo@24.09")
    assert (old.attention_kernel, new.attention_kernel) == ("flash2", "flash")
    assert replace(old, name="x", released="", attention_kernel="flash") == replace(new, name="x", released="")
    assert replace(new, name="x", released="") == replace(get_framework("nemo@25.02"), name="x", released="")


def test_the_old_names_keep_their_defaults():
    assert set(FRAMEWORK_PROFILES) >= {"megatron", "nemo", "torchtitan", "deepspeed", "pytorch-eager",
                                       "pytorch-compile"}
    # megatron and nemo are the documented releases under their old names
    assert replace(get_framework("megatron"), name="x", released="") == replace(
        get_framework("megatron-core@2024"), name="x", released="")
    assert equivalent_release(get_framework("nemo")).name == "nemo@25.02"
    assert get_framework("mcore").name == "megatron" and get_framework("eager").name == "pytorch-eager"


def test_stacks_carry_the_kernels_their_sources_name():
    for old in ("megatron-lm@2021", "megatron-lm@2022", "megatron-deepspeed", "deepspeed-zero3@2021"):
        fw = get_framework(old)
        assert fw.attention_kernel == "unfused" and not fw.overlap_tp_comm and not fw.capabilities.tp_overlap
    assert get_framework("megatron-core@2024").overlap_tp_comm
    assert get_framework("megatron-core@2024").attention_kernel == "flash"
    eager, compiled = get_framework("torchtitan-eager"), get_framework("torchtitan-compile")
    assert eager.attention_kernel == compiled.attention_kernel == "flash2"
    assert not (eager.fused_bias_act or eager.fused_residual or eager.fused_rope)
    assert compiled.fused_bias_act and compiled.fused_residual and compiled.fused_rope
    assert not compiled.fused_cross_entropy            # the loss stays outside the compiled blocks
    assert compiled.capabilities.tp_overlap and not eager.capabilities.tp_overlap   # async TP needs compile
    # Megatron-LM 2021: local DDP after the backward, blocking p2p, no distributed optimizer
    m21 = get_framework("megatron-lm@2021")
    assert not m21.overlap_dp_comm and not m21.overlap_pp_comm and m21.capabilities.zero_stages == (0,)
    assert get_framework("megatron-lm@2022").capabilities.zero_stages == (0, 1)


def test_fp16_gradients_reduce_in_the_parameter_dtype_where_the_stack_does():
    class P:
        grad_reduce_dtype = None
        precision = "fp16"
    assert for_plan(get_framework("megatron-lm@2021"), P()).grad_reduce_bytes == 2
    assert for_plan(get_framework("megatron-deepspeed"), P()).grad_reduce_bytes == 2
    assert for_plan(get_framework("megatron"), P()).grad_reduce_bytes == 4       # unchanged
    P.precision = "bf16"    # Megatron-LM forces fp32 accumulation and reduction for bf16
    assert for_plan(get_framework("megatron-lm@2021"), P()).grad_reduce_bytes == 4


def test_torchtitan_compile_flag_picks_the_stack():
    assert resolve_stack("torchtitan", "2024-12", True)[0] == "torchtitan-compile"
    assert resolve_stack("torchtitan", None, False)[0] == "torchtitan-eager"
    assert resolve_stack("torchtitan", None, None)[0] == "torchtitan"


def test_versions_as_sources_write_them():
    assert parse_version("nemo", "24.07") == (2024, 7)
    assert parse_version("nemo", "25.02.01") == (2025, 2)
    assert parse_version("megatron", "2021") == (2021, 12)
    assert parse_version("megatron", "core_r0.8.0") == (2024, 8)
    assert parse_version("torchtitan", "2024-12") == (2024, 12)
    with pytest.raises(ClusterTwinError, match="framework_version"):
        resolve_stack("megatron", "not-a-version")
    with pytest.raises(ClusterTwinError, match="unknown framework"):
        get_framework("nonesuch")
    with pytest.raises(ClusterTwinError) as err:
        get_framework("megatron@19x9")
    assert err.value.one_line().startswith("framework:")


def test_docs_show_the_stacks_table():
    assert stacks_markdown() in DOCS.read_text()


def test_a_family_at_nothing_is_refused_not_read_as_the_family():
    """``hai-llm@`` names no release: refused with the field and the fix, never priced as plain hai-llm."""
    from clustertwin.errors import SpecError
    from clustertwin.specs.framework import get_framework
    with pytest.raises(SpecError, match="names no release"):
        get_framework("hai-llm@")
    with pytest.raises(SpecError, match="names no release"):
        get_framework("megatron@ ")


def test_a_stack_named_outright_takes_a_version() -> None:
    """A stack named outright (torchtitan-eager, llm-foundry-flash) with a release is that stack, the
    release noted where it is not the documented one; an unreadable release is refused for every family."""
    from clustertwin.errors import SpecError
    from clustertwin.specs.framework import resolve_stack
    assert resolve_stack("torchtitan-eager", "2024-12") == ("torchtitan-eager", "")
    name, note = resolve_stack("llm-foundry-flash", "2024-01")
    assert name == "llm-foundry-flash" and "2024-01" in note
    for fw in ("llm-foundry", "llm-foundry-flash", "nemo", "torchtitan-eager"):
        with pytest.raises(SpecError, match="cannot read 'abc'"):
            resolve_stack(fw, "abc")
