"""Hardware presets in the catalog: every GPU, node and cluster loads, names are forgiving, every number is sourced,
and the numbers pass sanity checks against the datasheets they cite."""
from __future__ import annotations

import re

import pytest
import yaml

from clustertwin.catalog import (
    CATALOG_DIR,
    _squash,
    cluster_for_gpu,
    default_node_name,
    load_cluster,
    load_gpu,
    load_node,
    normalize,
    preset_names,
)
from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec, GPUSpec, NodeSpec

HW_KINDS = ("gpus", "nodes", "clusters")
LOADERS = {"gpus": load_gpu, "nodes": load_node, "clusters": load_cluster}

GPUS = preset_names("gpus")
NODES = preset_names("nodes")
CLUSTERS = preset_names("clusters")
ALL_FILES = [(k, n) for k in HW_KINDS for n in preset_names(k)]


def _raw(kind: str, name: str) -> dict:
    return yaml.safe_load((CATALOG_DIR / kind / f"{name}.yaml").read_text(encoding="utf-8"))


# --- the catalog holds what the project promises ----------------------------------------------------------------

def test_expected_presets_exist():
    for g in ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h100-sxm-96gb", "h800", "h200", "b200",
              "mi250x", "mi300x"):
        assert g in GPUS, g
    for n in ("dgx-a100", "dgx-a100-40gb", "dgx-h100", "hgx-h200", "dgx-b200", "mi300x-platform", "hgx-h800",
              "h100-pcie-server", "grand-teton", "frontier-node"):
        assert n in NODES, n
    for c in ("selene", "dgx-h100-superpod", "eos", "meta-llama3-24k", "deepseek-v3-h800", "dgx-h200-superpod",
              "dgx-b200-superpod", "mi300x-cluster"):
        assert c in CLUSTERS, c


# --- every preset loads -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_loads(name):
    g = load_gpu(name)
    assert isinstance(g, GPUSpec)
    assert g.name == name == _raw("gpus", name)["name"]
    assert g.source


@pytest.mark.parametrize("name", NODES)
def test_every_node_loads(name):
    n = load_node(name)
    assert isinstance(n, NodeSpec)
    assert n.name == name
    assert n.source
    assert n.gpu.name in GPUS


@pytest.mark.parametrize("name", CLUSTERS)
def test_every_cluster_loads(name):
    c = load_cluster(name)
    assert isinstance(c, ClusterSpec)
    assert c.name == name
    assert c.source
    assert c.node.name in NODES
    assert c.num_gpus == c.num_nodes * c.node.gpus_per_node


@pytest.mark.parametrize("kind,name", ALL_FILES)
def test_file_layout(kind, name):
    raw = _raw(kind, name)
    assert raw["name"] == name, "file stem and name must match"
    assert isinstance(raw.get("aliases"), list) and raw["aliases"], "give aliases for what people type"
    assert isinstance(raw.get("source"), str) and raw["source"].strip()
    first = (CATALOG_DIR / kind / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# "), "start with a header comment naming the source"
    if kind == "gpus":
        assert raw.get("default_node"), "GPUs name their standard node"


# --- names are forgiving ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("typed", ["h100", "H100", "H100-SXM", "h100_sxm", "h100 sxm", "H100SXM", "h100-sxm5",
                                   "  h100-sxm  "])
def test_h100_names(typed):
    assert load_gpu(typed).name == "h100-sxm"


@pytest.mark.parametrize("typed,expected", [
    ("a100", "a100-80gb"), ("A100-SXM4-40GB", "a100-40gb"), ("a100_80gb", "a100-80gb"),
    ("H100 PCIe", "h100-pcie"), ("H800", "h800"), ("h200_sxm", "h200"), ("B200", "b200"),
    ("MI300X", "mi300x"), ("amd_mi250x", "mi250x"), ("H100-SXM-96GB", "h100-sxm-96gb"),
])
def test_gpu_aliases(typed, expected):
    assert load_gpu(typed).name == expected


@pytest.mark.parametrize("typed,expected", [
    ("DGX-H100", "dgx-h100"), ("hgx_h100", "dgx-h100"), ("DGX A100", "dgx-a100"), ("dgx-a100-320gb", "dgx-a100-40gb"),
    ("HGX-H200", "hgx-h200"), ("DGX B200", "dgx-b200"), ("Grand Teton", "grand-teton"), ("frontier", "frontier-node"),
    ("MI300X platform", "mi300x-platform"), ("dgx_h800", "hgx-h800"),
])
def test_node_aliases(typed, expected):
    assert load_node(typed).name == expected


@pytest.mark.parametrize("typed,expected", [
    ("Selene", "selene"), ("EOS", "eos"), ("llama3_24k", "meta-llama3-24k"), ("DeepSeek-V3", "deepseek-v3-h800"),
    ("h100 superpod", "dgx-h100-superpod"), ("b200-superpod", "dgx-b200-superpod"), ("MI300X_cluster", "mi300x-cluster"),
])
def test_cluster_aliases(typed, expected):
    assert load_cluster(typed).name == expected


@pytest.mark.parametrize("kind", HW_KINDS)
def test_no_name_or_alias_points_at_two_presets(kind):
    seen: dict[str, str] = {}
    for name in preset_names(kind):
        raw = _raw(kind, name)
        keys = {k for n in [name, raw["name"], *raw.get("aliases", [])] for k in (normalize(str(n)), _squash(str(n)))}
        for key in keys:
            assert seen.setdefault(key, name) == name, f"{kind}: {key!r} names both {seen[key]} and {name}"


@pytest.mark.parametrize("loader,typed,close", [
    (load_gpu, "h10", "h100"), (load_gpu, "h100-sxn", "h100-sxm"), (load_gpu, "mi300", "mi300x"),
    (load_node, "dgx-h10", "dgx-h100"), (load_cluster, "selen", "selene"),
])
def test_unknown_name_suggests_close_names(loader, typed, close):
    with pytest.raises(SpecError) as e:
        loader(typed)
    msg = str(e.value)
    assert "unknown" in msg and "did you mean" in msg and close in msg
    assert "\n" not in msg


def test_unknown_name_without_neighbours_points_to_list():
    with pytest.raises(SpecError) as e:
        load_gpu("zzzz-quantum-toaster")
    assert "clustertwin list gpus" in str(e.value)


# --- every number carries its source ----------------------------------------------------------------------------

_KEY_VALUE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*:\s*(?P<value>[^#]*?)\s*(?P<comment>#.*)?$")


@pytest.mark.parametrize("kind,name", ALL_FILES)
def test_every_numeric_line_has_a_comment(kind, name):
    text = (CATALOG_DIR / kind / f"{name}.yaml").read_text(encoding="utf-8")
    numeric = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _KEY_VALUE.match(line)
        assert m, f"{name}.yaml:{lineno}: not a simple 'key: value' line: {line!r}"
        value = m.group("value").strip().strip("'\"")
        if re.match(r"^[0-9.]", value):
            numeric += 1
            comment = (m.group("comment") or "").lstrip("#").strip()
            assert len(comment) >= 8, f"{name}.yaml:{lineno}: number without a source comment: {line!r}"
    assert numeric, f"{name}.yaml has no numbers at all?"


# --- sanity against the datasheets ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", GPUS)
def test_gpu_invariants(name):
    g = load_gpu(name)
    p = g.peak_flops
    assert "bf16" in p
    if "fp8" in p:
        assert p["fp8"] >= p["bf16"]
    if "fp4" in p:
        assert p["fp4"] >= p.get("fp8", p["bf16"])
    if "tf32" in p:
        assert p["tf32"] <= p["bf16"]
    if "fp32" in p:
        assert p["fp32"] <= p["bf16"]
    assert 1e14 <= p["bf16"] <= 1e16                                  # 100 TFLOPS .. 10 PFLOPS per GPU
    assert 16 * 2**30 <= g.hbm_bytes <= 512 * 2**30
    assert 1e12 <= g.hbm_bandwidth_bytes_per_s <= 2e13
    assert g.scaleup_bandwidth_bytes_per_s > g.pcie_bandwidth_bytes_per_s
    assert 100 <= g.tdp_w <= 1500
    assert 50 <= g.sm_count <= 400
    # a GPU's peak FLOPs per byte of HBM bandwidth stays within what real parts show (~100..700 for bf16)
    assert 50 <= p["bf16"] / g.hbm_bandwidth_bytes_per_s <= 800


def test_h100_sxm_numbers():
    g = load_gpu("h100")
    assert g.peak("bf16") == pytest.approx(989.4e12, rel=0.01)
    assert g.peak("fp8") == pytest.approx(1978.9e12, rel=0.01)
    assert g.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert g.scaleup_bandwidth_bytes_per_s == pytest.approx(450e9)    # 900 GB/s NVLink total, per direction
    assert g.hbm_bytes == 80 * 2**30
    assert g.sm_count == 132 and g.tdp_w == 700


@pytest.mark.parametrize("name,bw", [
    ("a100-40gb", 1.555e12), ("a100-80gb", 2.039e12), ("h100-sxm", 3.35e12), ("h100-pcie", 2.0e12),
    ("h800", 3.35e12), ("h200", 4.8e12), ("b200", 7.7e12), ("mi300x", 5.3e12), ("mi250x", 3.2768e12 / 2),
])
def test_hbm_bandwidths(name, bw):
    assert load_gpu(name).hbm_bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-3)


@pytest.mark.parametrize("name,total_bidirectional", [
    ("a100-40gb", 600e9), ("a100-80gb", 600e9), ("h100-sxm", 900e9), ("h800", 400e9), ("h200", 900e9),
    ("b200", 1.8e12), ("mi300x", 896e9),
])
def test_scaleup_is_per_direction(name, total_bidirectional):
    assert load_gpu(name).scaleup_bandwidth_bytes_per_s == pytest.approx(total_bidirectional / 2)


@pytest.mark.parametrize("name,bf16,fp8", [
    ("a100-80gb", 312e12, None), ("h100-pcie", 756.5e12, 1513e12), ("h200", 989.4e12, 1978.9e12),
    ("b200", 2.25e15, 4.5e15), ("mi300x", 1307.4e12, 2614.9e12), ("mi250x", 383e12 / 2, None),
])
def test_dense_peaks(name, bf16, fp8):
    g = load_gpu(name)
    assert g.peak_flops["bf16"] == pytest.approx(bf16, rel=0.01)
    assert g.peak_flops.get("fp8") == (pytest.approx(fp8, rel=0.01) if fp8 else None)
    if fp8 is None:
        assert g.peak("fp8") == g.peak_flops["bf16"]                  # falls back to bf16 without FP8 units


def test_b200_fp4_and_memory():
    g = load_gpu("b200")
    assert g.peak_flops["fp4"] == pytest.approx(9e15)
    assert g.hbm_bytes == 180 * 2**30


def test_h800_is_h100_with_less_nvlink():
    h100, h800 = load_gpu("h100-sxm"), load_gpu("h800")
    assert h800.peak_flops == h100.peak_flops
    assert h800.hbm_bytes == h100.hbm_bytes
    assert h800.scaleup_bandwidth_bytes_per_s < h100.scaleup_bandwidth_bytes_per_s


@pytest.mark.parametrize("name", NODES)
def test_node_invariants(name):
    n = load_node(name)
    assert 1 <= n.gpus_per_node <= 72
    assert n.gpu_scaleup_bandwidth > n.nic_bandwidth_per_gpu           # scale-up beats scale-out per GPU
    assert 12.5e9 <= n.nic_bandwidth_bytes_per_s <= 100e9               # 100 .. 800 Gb/s per NIC
    if n.gpu.vendor == "amd":
        assert n.scaleup_fabric == "xgmi"
    elif n.scaleup_fabric == "nvswitch":
        assert n.scaleup_bandwidth_bytes_per_s is None                 # NVSwitch gives every GPU its full link


@pytest.mark.parametrize("name,nics,gbps", [
    ("dgx-a100", 8, 200), ("dgx-a100-40gb", 8, 200), ("dgx-h100", 8, 400), ("hgx-h200", 8, 400),
    ("dgx-b200", 8, 400), ("mi300x-platform", 8, 400), ("hgx-h800", 8, 400), ("grand-teton", 8, 400),
    ("frontier-node", 4, 200),
])
def test_node_nics(name, nics, gbps):
    n = load_node(name)
    assert n.nics_per_node == nics
    assert n.nic_bandwidth_bytes_per_s == pytest.approx(gbps * 1e9 / 8)


@pytest.mark.parametrize("name", CLUSTERS)
def test_cluster_invariants(name):
    c = load_cluster(name)
    assert 0 < c.intra_node_latency_s <= c.inter_node_latency_s <= 50e-6
    assert 1e-7 <= c.intra_node_latency_s
    assert c.num_gpus >= 256
    assert c.topology == "fat-tree" or c.oversubscription == 1.0


def test_named_clusters():
    assert load_cluster("selene").gpu.name == "a100-80gb"              # SC21: 80 GB A100s
    assert load_cluster("deepseek-v3").num_gpus == 2048
    assert load_cluster("eos").num_gpus == 4608
    meta = load_cluster("meta-llama3-24k")
    assert meta.num_gpus == 24576 and meta.topology == "fat-tree" and meta.oversubscription == 7.0
    assert meta.gpu.name == "h100-sxm"                                # Llama 3 paper: 80 GB HBM3 at 700 W
    if "nodes_per_leaf" in ClusterSpec.model_fields:
        assert meta.nodes_per_leaf == 384                              # one 3,072-GPU pod is full bisection
    assert meta.with_gpus(16384).num_nodes == 2048


# --- GPUs and their standard nodes ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", GPUS)
def test_default_node_exists_and_fits(name):
    node_name = default_node_name(name)
    assert node_name in NODES, f"{name}: default_node {node_name!r} is not a node preset"
    node = load_node(node_name)
    assert node.gpu.vendor == load_gpu(name).vendor


@pytest.mark.parametrize("name", GPUS)
def test_cluster_for_every_gpu(name):
    g = load_gpu(name)
    c = cluster_for_gpu(name, 64)
    assert c.gpu == g
    assert c.num_gpus == 64
    assert c.node.name == default_node_name(name)


def test_cluster_for_h100_is_dgx_h100():
    c = cluster_for_gpu("h100", 64)
    assert c.num_nodes == 8
    assert c.node.name == "dgx-h100"
    assert c.gpus_per_node == 8
    assert c.gpu.name == "h100-sxm"
    assert c.node.nic_bandwidth_per_gpu == pytest.approx(50e9)


def test_a_nodes_gpu_defaults_to_a_node_with_that_gpu():
    for name in NODES:
        gpu = load_node(name).gpu.name
        assert load_node(default_node_name(gpu)).gpu.name == gpu
