"""A node's network-plugin latency (``net_plugin_latency_s``): the latency an NCCL net plugin reports
(ncclNetProperties.latency), which NCCL's tuning.cc adds to every network step, twice for Simple."""
from __future__ import annotations

import math

import pytest

from clustertwin.calibrate.profile import profile_for
from clustertwin.catalog import cluster_for_gpu, load_cluster, load_node
from clustertwin.cli import main
from clustertwin.cost.network import ALGORITHMS, PROTOCOLS, NetworkPricer
from clustertwin.parallel.layout import place_group
from clustertwin.validate.collectives import cluster_of

US = 1e-6


def _with_plugin(cluster, seconds):
    return cluster.model_copy(update={"node": cluster.node.model_copy(update={"net_plugin_latency_s": seconds})})


def test_presets_carry_the_efa_plugin_latency_and_others_none():
    assert load_node("aws-p4d").net_plugin_latency_s == pytest.approx(75 * US)
    assert load_node("aws-p4de").net_plugin_latency_s == pytest.approx(75 * US)
    assert load_node("dgx-h100").net_plugin_latency_s == 0.0


def test_plugin_latency_is_added_per_network_step_twice_for_simple():
    """Tree all-reduce over N nodes has 2 log2(N) network steps: each gains p (LL, LL128) or 2p (Simple);
    a one-node group has no network step and does not move."""
    c = cluster_for_gpu("a100-80gb", 32)
    p = 75 * US
    base, plug = NetworkPricer(c, profile_for(c.gpu)), NetworkPricer(_with_plugin(c, p), profile_for(c.gpu))
    pl = place_group(32, 1, 8)                      # 4 nodes: 2 x log2(4) = 4 network steps
    tree = ALGORITHMS.index("tree")
    a, b = base.options("all_reduce", pl), plug.options("all_reduce", pl)
    rows = [(i, int(a[i, 3])) for i in range(len(a)) if int(a[i, 2]) == tree]
    assert rows
    for i, proto in rows:
        per_step = 2 * p if PROTOCOLS[proto] == "simple" else p
        assert b[i, 0] - a[i, 0] == pytest.approx(4 * per_step)
        assert b[i, 1] == a[i, 1]                   # bandwidth untouched
    one = place_group(8, 1, 8)
    assert (plug.options("all_reduce", one) == base.options("all_reduce", one)).all()
    # a send between nodes pays it once
    two = place_group(16, 1, 8)
    assert plug.latency(two, "send_recv") - base.latency(two, "send_recv") == pytest.approx(p)


def test_more_plugin_latency_is_never_faster():
    c = cluster_for_gpu("h100-sxm", 16)
    pl = place_group(16, 1, 8)
    times = [[NetworkPricer(_with_plugin(c, p), profile_for(c.gpu)).time(op, size, pl) for p in (0, 10 * US, 75 * US)]
             for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
             for size in (8, 64 * 1024, 16 << 20, 1 << 30)]
    assert all(t[0] <= t[1] <= t[2] and all(math.isfinite(x) for x in t) for t in times)


def test_validation_rows_get_it_on_the_node_not_the_cluster():
    row = {"run_id": "aws-p4de-2node-allreduce", "gpu": "a100-80gb", "num_gpus": "16", "gpus_per_node": "8",
           "nodes": "2", "interconnect": "NVSwitch NVLink3 intra-node; 4x100Gb/s EFA per node (400 Gbps)"}
    c = cluster_of(row)
    assert c.node.net_plugin_latency_s == pytest.approx(75 * US)
    assert c.inter_node_latency_s == cluster_for_gpu("a100-80gb", 16).inter_node_latency_s
    tcpxo = {**row, "run_id": "gcp-a3mega-2node-allreduce", "gpu": "h100-sxm",
             "interconnect": "NVSwitch NVLink4 intra-node; GPUDirect-TCPXO"}
    assert cluster_of(tcpxo).node.net_plugin_latency_s == 0.0


def test_a_user_cluster_of_p4de_nodes_pays_it(tmp_path):
    f = tmp_path / "p4de.yaml"
    f.write_text("name: my-p4de\nnode: aws-p4de\nnum_nodes: 2\n")
    cluster = load_cluster(str(f))
    assert cluster.node.net_plugin_latency_s == pytest.approx(75 * US)
    plain = _with_plugin(cluster, 0.0)
    pl = place_group(16, 1, 8)
    assert NetworkPricer(cluster, profile_for(cluster.gpu)).time("all_reduce", 8, pl) > \
        NetworkPricer(plain, profile_for(cluster.gpu)).time("all_reduce", 8, pl)


@pytest.mark.parametrize("value", ["5s", "-1us", "fast"])
def test_bad_plugin_latency_is_one_line(tmp_path, capsys, value):
    f = tmp_path / "c.yaml"
    f.write_text("name: c\nnum_nodes: 2\nnode:\n  name: n\n  gpu: a100-80gb\n  nic_bandwidth_bytes_per_s: 200Gbps\n"
                 f"  net_plugin_latency_s: {value}\n")
    code = main(["collective", "--op", "all_reduce", "--bytes", "1GiB", "--cluster", str(f)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "net_plugin_latency_s" in lines[0], lines[0]
