"""The constant table: every entry carries a unit and a source, the pricing code reads its values
from it, and docs/model.md's constant tables are the ones it generates."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from clustertwin import constants
from clustertwin.constants import ASSUMED, CONSTANTS, TABLE, Constant, group, render, value

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "clustertwin"


def test_every_constant_has_a_unit_a_source_and_what_it_prices():
    for c in CONSTANTS:
        assert isinstance(c.value, (int, float)) and not isinstance(c.value, bool), c.name
        assert c.unit.strip(), f"{c.name}: no unit"
        assert c.prices.strip(), f"{c.name}: does not say what it prices"
        assert c.source.strip(), f"{c.name}: no source"
        if c.assumed:  # "assumed:" must say why
            assert len(c.source[len(ASSUMED):].strip()) >= 20, f"{c.name}: assumed without a reason"
        for text in (c.name, c.unit, c.prices, c.source):
            assert "|" not in text and "\n" not in text, f"{c.name}: would break the markdown table"


def test_names_are_unique_and_looked_up():
    assert len(TABLE) == len(CONSTANTS)
    assert value("schedule.dp_bucket_elements") == 40e6
    assert constants.constant("optimizer.kernels").unit == "kernels"
    with pytest.raises(KeyError):
        value("no.such.constant")
    assert Constant("x", 1.0, "s", "assumed: for the test of the dataclass", "nothing").assumed


def test_group_takes_one_level_in_table_order():
    tiles = group("gemm_tile_efficiency")
    assert list(tiles) == ["256x128", "128x256", "128x128", "64x128", "64x64"]
    hopper = group("profile.hopper")
    assert "gemm_efficiency" not in hopper and "bf16" not in hopper   # the dtype table is one level down
    assert group("profile.hopper.gemm_efficiency")["bf16"] == value("profile.hopper.gemm_efficiency.bf16")


def test_architecture_profiles_are_the_table():
    from clustertwin.cost.profile import ARCH_PROFILES
    for arch, prof in ARCH_PROFILES.items():
        assert prof.gemm_efficiency == group(f"profile.{arch}.gemm_efficiency")
        for key, v in group(f"profile.{arch}").items():
            assert getattr(prof, key) == v, (arch, key)
    # every numeric field of a profile comes from the table (none left to a dataclass default)
    numeric = {"wave_quantization", "k_half", "attention_fwd_efficiency", "attention_bwd_efficiency",
               "attention_seq_half", "memory_efficiency", "nvlink_efficiency", "nic_efficiency"}
    for arch in ARCH_PROFILES:
        assert numeric <= set(group(f"profile.{arch}")), arch


def test_code_reads_the_table():
    from clustertwin.cost import compute
    from clustertwin.schedule import memory, step
    from clustertwin.specs.hardware import ClusterSpec, GPUSpec
    assert compute._TILES[2] == (128, 128, value("gemm_tile_efficiency.128x128"))
    assert compute.OPTIMIZER_KERNELS == value("optimizer.kernels")
    assert step.BUCKET_ELEMENTS == value("schedule.dp_bucket_elements")
    assert step.FSDP_PREFETCH_UNITS == value("schedule.fsdp_prefetch_units")
    assert memory._ADAM_WITH_MASTER == value("memory.adam_bytes_per_param_with_master")
    assert ClusterSpec.model_fields["inter_node_latency_s"].default == value("cluster.inter_node_latency_s")
    assert ClusterSpec.model_fields["nodes_per_leaf"].default == value("cluster.nodes_per_leaf")
    assert GPUSpec.model_fields["pcie_bandwidth_bytes_per_s"].default == value("gpu.pcie_bandwidth_bytes_per_s")


def test_fsdp_exposes_the_first_gather_and_the_last_reduce_scatter_when_compute_hides_the_rest():
    from clustertwin.schedule.step import exposed_fsdp
    # 10 units, 1 s of gathers and 0.5 s of reduce-scatters per pass, ample compute: one unit's
    # gather in the forward, one gather and one reduce-scatter in the backward stay exposed
    # stay exposed; the 2.25 s hidden slow the compute beneath them by OVERLAP_SLOWDOWN per second
    from clustertwin.schedule.step import OVERLAP_SLOWDOWN as d
    assert exposed_fsdp(1.0, 0.5, 10, 10.0, 20.0, True) == pytest.approx(0.1 + 0.1 + 0.05 + d * 2.25)
    assert exposed_fsdp(1.0, 0.5, 10, 10.0, 20.0, False) == 2.5
    # compute shorter than the collectives: every unit exposes the difference
    exposed = 0.1 + 9 * 0.05 + 0.15 + 9 * 0.05
    assert exposed_fsdp(1.0, 0.5, 10, 0.5, 1.0, True) == pytest.approx(exposed + d * (2.5 - exposed))


def _numbers(path: Path) -> list[tuple[int, object]]:
    """Numeric literals of a module outside docstrings and keyword arguments such as maxsize=."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {id(k.value) for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords
            if k.arg == "maxsize"}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
            and id(n) not in skip]


# structural numbers that are no modelling constant: network.py's menu rows of 4 and 7 columns
_STRUCTURAL = {"cost/network.py": {4, 7}}


@pytest.mark.parametrize("module", ["cost/compute.py", "cost/network.py", "cost/profile.py"])
def test_pricing_modules_hold_no_unsourced_constant(module):
    """Apart from 0, 1 and 2 (ring factors, identities), a number in the pricing code lives in the table."""
    allowed = {0, 1, 2} | _STRUCTURAL.get(module, set())
    stray = [(line, v) for line, v in _numbers(SRC / module) if v not in allowed]
    assert not stray, f"{module}: move these into clustertwin.constants with a source: {stray}"


def test_constants_module_imports_nothing_from_the_package():
    tree = ast.parse((SRC / "constants.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("clustertwin"), node.module


def test_model_doc_tables_are_generated_from_the_table():
    doc = (ROOT / "docs" / "model.md").read_text(encoding="utf-8")
    assert "<!-- BEGIN generated constants:architectures" in doc and "<!-- BEGIN generated constants:all" in doc
    assert render(doc) == doc, "docs/model.md is stale: run python benchmarks/constants_table.py --write docs/model.md"
    for c in CONSTANTS:
        assert f"| `{c.name}` |" in doc


def test_render_replaces_only_the_marked_blocks():
    doc = ("before\n<!-- BEGIN generated constants:architectures (x) -->\nold\n"
           "<!-- END generated constants:architectures -->\nafter\n")
    out = render(doc)
    assert out.startswith("before\n") and out.endswith("after\n") and "old" not in out
    assert "| Hopper (H100, H800, H200) |" in out
    assert render(out) == out
