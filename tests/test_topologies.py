"""Topologies in cluster files (issue 19 item 2): per-tier tapers, rail-only, torus with optical
circuit switches; every existing cluster keeps its prices; the docs' example files run as written."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from clustertwin.catalog import load_cluster, preset_names
from clustertwin.cli import main
from clustertwin.cluster.collective import price_collective
from clustertwin.cost.network import torus_slice
from clustertwin.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "docs" / "examples"
GiB = 1 << 30


def busbw(cluster, op, n, nbytes=GiB):
    return price_collective(cluster, op, nbytes, n).busbw_bytes_per_s


def test_per_tier_taper_is_paid_only_beyond_its_tier():
    c = load_cluster(EX / "fat-tree-3tier.yaml")
    in_pod, two_pods = busbw(c, "all_reduce", 3072), busbw(c, "all_reduce", 6144)
    assert two_pods < in_pod / 5                  # the 1:7 aggregation layer
    flat = c.model_copy(update={"tier_oversubscription": (1.0, 1.0)})
    assert busbw(flat, "all_reduce", 6144) == pytest.approx(in_pod, rel=0.05)


def test_catalog_llama3_cluster_matches_its_tier_by_tier_description_at_large_sizes():
    per_tier = load_cluster(EX / "fat-tree-3tier.yaml")
    catalog = load_cluster("meta-llama3-24k")
    for n in (3072, 6144):
        assert busbw(per_tier, "all_reduce", n, 16 * GiB) == pytest.approx(busbw(catalog, "all_reduce", n, 16 * GiB),
                                                                          rel=0.02)


def test_rail_only_all_to_all_pays_the_nvlink_forwarding_and_rings_do_not():
    rail_only = load_cluster(EX / "rail-only.yaml")
    rail_opt = rail_only.model_copy(update={"topology": "rail-optimized"})
    slow_nic = lambda c: c.model_copy(update={"node": c.node.model_copy(update={"nic_bandwidth_bytes_per_s": 400e9})})
    # with NICs as fast as NVLink the forwarding shows; rings see no difference
    assert busbw(slow_nic(rail_only), "all_to_all", 64) < busbw(slow_nic(rail_opt), "all_to_all", 64)
    assert busbw(rail_only, "all_reduce", 64) == busbw(rail_opt, "all_reduce", 64)


def test_torus_slices_wrap_with_whole_ocs_blocks():
    tpu = load_cluster(EX / "tpu-v4-torus.yaml")
    assert torus_slice(tpu, 16) == [(16, True), (1, False), (1, False)]
    assert torus_slice(tpu, 64) == [(16, True), (4, True), (1, False)]
    assert torus_slice(tpu, 4096) == [(16, True), (16, True), (16, True)]
    fixed = load_cluster(EX / "torus-2d-no-ocs.yaml")
    assert torus_slice(fixed, 16) == [(16, False), (1, False)]
    # more wrapped dimensions, more links: the 64-chip slice all-reduces ~2x the 16-chip one; an open line half
    b16, b64 = busbw(tpu, "all_reduce", 16, 4 * GiB), busbw(tpu, "all_reduce", 64, 4 * GiB)
    assert 1.7 < b64 / b16 < 2.05
    assert busbw(fixed, "all_reduce", 16, 4 * GiB) == pytest.approx(b16 / 2, rel=0.05)


def test_torus_runs_rings_only_and_bisection_bounds_all_to_all():
    tpu = load_cluster(EX / "tpu-v4-torus.yaml")
    assert price_collective(tpu, "all_reduce", GiB, 64).algorithm == "ring"
    with pytest.raises(SpecError, match="tree"):
        price_collective(tpu, "all_reduce", GiB, 64, algorithm="tree")
    a2a = busbw(tpu, "all_to_all", 4096)
    link = tpu.torus_link_bandwidth_bytes_per_s
    assert a2a < 8 * link / 16 * 1.01


def test_every_catalog_cluster_prices_as_a_rail_optimized_or_fat_tree():
    """The new fields default to nothing: a catalog cluster's collective prices do not depend on them."""
    for name in preset_names("clusters"):
        c = load_cluster(name)
        assert c.topology in ("rail-optimized", "fat-tree") and not c.tier_oversubscription and c.nodes_per_pod is None
        assert not c.in_network_reduction


@pytest.mark.parametrize("text, field", [
    ("topology: torus\ntorus_dims: [4]\ntorus_link_bandwidth_bytes_per_s: 45GB/s", "torus_dims"),
    ("topology: torus\ntorus_dims: [2, 2]\ntorus_link_bandwidth_bytes_per_s: 45GB/s", "torus_dims"),
    ("topology: torus\ntorus_dims: [8, 8]", "torus_link_bandwidth_bytes_per_s"),
    ("topology: torus\ntorus_dims: [8, 8]\ntorus_link_bandwidth_bytes_per_s: 45", "torus_link_bandwidth_bytes_per_s"),
    ("topology: torus\ntorus_dims: [8, 8]\nocs_block: [3, 4]\ntorus_link_bandwidth_bytes_per_s: 45GB/s", "ocs_block"),
    ("topology: fat-tree\ntorus_dims: [8, 8]", "torus_dims"),
    ("tier_oversubscription: [0.5]", "tier_oversubscription"),
    ("topology: mesh", "topology"),
])
def test_bad_topology_fields_are_one_line(tmp_path, capsys, text, field):
    f = tmp_path / "c.yaml"
    f.write_text(f"name: bad\nnode: dgx-h100\nnum_nodes: 16\n{text}\n")
    code = main(["collective", "--op", "all_reduce", "--bytes", "1GiB", "--cluster", str(f)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: ") and field in lines[0], lines[0]


def test_docs_commands_run_as_written(capsys):
    text = (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    commands = [line.split()[1:] for block in re.findall(r"```\n(.*?)```", text, flags=re.S)
                for line in block.splitlines() if line.startswith(("clustertwin collective", "clustertwin place"))]
    assert len(commands) >= 10
    for args in commands:
        code = main(args)
        out, err = capsys.readouterr()
        assert code == 0, (args, err)
