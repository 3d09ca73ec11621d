"""The node's fabric as the collectives see it: AMD's fully connected xGMI mesh (a group of g GPUs uses
g - 1 of each GPU's links, a send one link) and NICs without ordered 128-byte delivery (EFA on p4d/p4de:
NCCL Simple only), both read from the node spec, checked by hand and as invariants."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clustertwin.calibrate.profile import profile_for
from clustertwin.catalog import cluster_for_gpu, load_cluster, load_node
from clustertwin.cli import main
from clustertwin.cost.network import PROTOCOLS, NetworkPricer
from clustertwin.errors import SpecError
from clustertwin.parallel.layout import place_group
from clustertwin.specs.hardware import NodeSpec
from clustertwin.validate.collectives import compare

CSV = Path(__file__).resolve().parents[1] / "data" / "validation" / "nccl_tests.csv"
GiB, MiB = 1 << 30, 1 << 20


def _mi300x(n: int = 8):
    c = cluster_for_gpu("mi300x", n)
    return c, NetworkPricer(c, profile_for(c.gpu))


def test_mi300x_node_is_a_full_mesh_of_seven_links():
    node = load_node("mi300x-platform")
    assert node.scaleup_mesh and node.scaleup_links == 7
    assert node.scaleup_link_bandwidth == pytest.approx(64e9)          # 448 GB/s / 7
    assert not load_node("dgx-h100").scaleup_mesh and load_node("dgx-h100").scaleup_links == 1
    # Frontier's GCDs are not fully connected: the preset keeps one figure for every group
    assert not load_node("frontier-node").scaleup_mesh


def test_a_group_uses_the_links_to_its_members():
    """TP=4 on an MI300X node: 3 of the 7 links (3/7 of the node's ring bandwidth); 2 GPUs and a send: one link."""
    c, net = _mi300x()
    eff = profile_for(c.gpu).nvlink_efficiency
    link = 64e9 * eff
    for g in (2, 4, 8):
        assert net.bandwidth(place_group(g, 1, 8), "all_reduce") == pytest.approx((g - 1) * link)
        assert net.bandwidth(place_group(g, 1, 8), "send_recv") == pytest.approx(link)
    tp4 = net.bandwidth(place_group(4, 1, 8), "all_reduce") / net.bandwidth(place_group(8, 1, 8), "all_reduce")
    assert tp4 == pytest.approx(3 / 7)
    # a large all-reduce of TP=4 takes 7/3 x (3/4 / 7/8) the 8-GPU time per byte, by the ring's bus factor
    t4 = net.time("all_reduce", 4 * GiB, place_group(4, 1, 8))
    t8 = net.time("all_reduce", 4 * GiB, place_group(8, 1, 8))
    assert t4 / t8 == pytest.approx((7 / 3) * (1.5 / 1.75), rel=0.01)


def test_a_job_on_part_of_the_node_keeps_the_link_speed():
    """A 4-GPU job (the cluster resized below a node) is the same 64 GB/s links, not 448 GB/s over 3."""
    c4, net4 = _mi300x(4)
    assert c4.gpus_per_node == 4 and c4.node.scaleup_links == 7
    _, net8 = _mi300x(8)
    pl = place_group(4, 1, 4)
    assert net4.bandwidth(pl, "all_reduce") == pytest.approx(net8.bandwidth(place_group(4, 1, 8), "all_reduce"))


def test_switch_nodes_are_unchanged_by_group_size():
    c = cluster_for_gpu("h100-sxm", 8)
    net = NetworkPricer(c, profile_for(c.gpu))
    bws = {net.bandwidth(place_group(g, 1, 8), k) for g in (2, 4, 8) for k in ("all_reduce", "send_recv")}
    assert len(bws) == 1


def test_more_links_never_slower():
    c, net = _mi300x()
    pl = place_group(4, 1, 8)
    faster = c.model_copy(update={"node": c.node.model_copy(update={"scaleup_bandwidth_bytes_per_s": 896e9})})
    net2 = NetworkPricer(faster, profile_for(c.gpu))
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast"):
        for size in (4096, 16 * MiB, GiB):
            assert net2.time(op, size, pl) <= net.time(op, size, pl)
    # a larger group of the same node never has less bandwidth per rank
    bw = [net.bandwidth(place_group(g, 1, 8), "all_reduce") for g in range(2, 9)]
    assert bw == sorted(bw)


def test_mesh_all_to_all_sends_each_share_over_its_own_link():
    """All-to-all of S bytes on g GPUs of the mesh: (g-1)/g of S leaves over g-1 links at once: S / g / link."""
    c, net = _mi300x()
    link = 64e9 * profile_for(c.gpu).nvlink_efficiency
    pl = place_group(4, 1, 8)
    t = net.time("all_to_all", GiB, pl)
    assert t - net.latency(pl, "all_to_all") == pytest.approx(GiB / 4 / link)


def test_mi300x_rccl_tests_rows_reproduced():
    """AMD's 8x MI300X all_reduce_perf (ROCm blog, RCCL 2.22.3): from 1 GiB within 10%, 16 MiB within 25%."""
    rows = [r for r in compare(CSV) if r.gpu == "mi300x"]
    assert len(rows) == 32
    assert all(abs(r.measured_s / r.model_s - 1) <= 0.10 for r in rows if r.nbytes >= GiB)
    (mid,) = [r for r in rows if r.nbytes == 16 * MiB]
    assert abs(mid.measured_s / mid.model_s - 1) <= 0.25


# --- NICs without ordered 128-byte delivery --------------------------------------------------------------------

def test_unordered_nics_leave_nccl_simple_only():
    node = load_node("aws-p4de")
    assert node.nic_ordered_128b_delivery is False
    c = cluster_for_gpu("a100-80gb", 16)
    efa = c.model_copy(update={"node": c.node.model_copy(update={"nic_ordered_128b_delivery": False})})
    net = NetworkPricer(efa, profile_for(c.gpu))
    assert net.protocols == ("simple",)
    for pl in (place_group(16, 1, 8), place_group(8, 1, 8)):
        opts = net.options("all_reduce", pl)
        assert {PROTOCOLS[int(p)] for p in opts[:, 3]} == {"simple"}
    # Simple only is never faster than NCCL's full menu
    full = NetworkPricer(c, profile_for(c.gpu))
    pl = place_group(16, 1, 8)
    for size in (8, 64 * 1024, 16 * MiB, GiB):
        assert net.time("all_reduce", size, pl) >= full.time("all_reduce", size, pl)
    with pytest.raises(SpecError, match="protocols"):
        NetworkPricer(efa, profile_for(c.gpu), ("ll", "ll128"))


def test_cluster_file_on_p4de_nodes_prices_simple(tmp_path, capsys):
    """A user's cluster of p4de nodes: `collective` reports Simple at sizes NCCL would take LL for."""
    f = tmp_path / "p4de.yaml"
    f.write_text("name: my-p4de\nnode: aws-p4de\nnum_nodes: 4\n")
    cluster = load_cluster(str(f))
    assert cluster.node.nic_ordered_128b_delivery is False
    code = main(["collective", "--op", "all_reduce", "--bytes", "64KiB", "--cluster", str(f), "--num-gpus", "16",
                 "--json"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["protocol"] == "simple"


def _bad_node_error(tmp_path, capsys, extra: str) -> tuple[int, str]:
    f = tmp_path / "c.yaml"
    f.write_text("name: c\nnum_nodes: 2\nnode:\n  name: n\n  gpu: mi300x\n  scaleup_fabric: xgmi\n"
                 "  nic_bandwidth_bytes_per_s: 400Gbps\n" + extra)
    code = main(["collective", "--op", "all_reduce", "--bytes", "1GiB", "--cluster", str(f)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra, field", [
    ("  scaleup_topology: torus\n", "scaleup_topology"),
    ("  scaleup_links_per_gpu: 3\n", "scaleup_links_per_gpu"),
    ("  scaleup_topology: switch\n  scaleup_links_per_gpu: 7\n", "scaleup_links_per_gpu"),
    ("  nic_ordered_128b_delivery: maybe\n", "nic_ordered_128b_delivery"),
])
def test_bad_fabric_fields_are_one_line(tmp_path, capsys, extra, field):
    code, err = _bad_node_error(tmp_path, capsys, extra)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert re.search(field, lines[0]), lines[0]


def test_node_spec_defaults_mesh_from_xgmi():
    gpu = load_node("mi300x-platform").gpu
    n = NodeSpec(name="n", gpu=gpu, scaleup_fabric="xgmi", nic_bandwidth_bytes_per_s=50e9)
    assert n.scaleup_mesh and n.scaleup_links == 7
    n = NodeSpec(name="n", gpu=gpu, scaleup_fabric="xgmi", scaleup_topology="switch", nic_bandwidth_bytes_per_s=50e9)
    assert not n.scaleup_mesh


def test_stacked_pricing_equals_one_by_one_on_the_mesh():
    """The training model's batched pricing (time_many) and one collective at a time (time) agree on mesh
    groups, sends included."""
    import numpy as np
    _, net = _mi300x()
    pls = [place_group(2, 1, 8), place_group(4, 1, 8), place_group(8, 1, 8), place_group(2, 4, 8)]
    sizes = np.array([1e3, 3e5, 16 * MiB, 2.5 * GiB, 7e4, 1e9])
    index = np.array([0, 1, 2, 3, 1, 0])
    for op in ("all_reduce", "all_gather", "send_recv"):
        got = net.time_many(op, sizes, pls, index)
        want = [net.time(op, float(s), pls[i]) for s, i in zip(sizes, index)]
        assert got == pytest.approx(want, rel=1e-12)
