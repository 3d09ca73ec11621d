"""NCCL_ALGO as a job sets it (NetworkPricer(algorithms=...)), and the documented job settings of the
nccl-tests runs that set it (validate.collectives.NCCL_ENV): checked by hand and as invariants."""
from __future__ import annotations

from pathlib import Path

import pytest

from clustertwin.calibrate.profile import profile_for
from clustertwin.catalog import cluster_for_gpu
from clustertwin.cost.network import BUS_FACTOR, NetworkPricer
from clustertwin.errors import SpecError
from clustertwin.parallel.layout import place_group
from clustertwin.validate.collectives import cluster_of, compare, nccl_env_of

CSV = Path(__file__).resolve().parents[1] / "data" / "validation" / "nccl_tests.csv"
GiB, MiB = 1 << 30, 1 << 20


def _two_nodes(gpu: str = "h100-sxm", **kw):
    c = cluster_for_gpu(gpu, 16, gpus_per_node=8)
    return c, NetworkPricer(c, profile_for(c.gpu), **kw), place_group(16, 1, 8)


def test_ring_only_picks_the_ring_and_is_never_faster():
    _, auto, pl = _two_nodes()
    _, ring, _ = _two_nodes(algorithms=("ring",))
    for size in (8, 64 * 1024, 16 * MiB, GiB, 8 * GiB):
        algo, _proto, t = ring.choose("all_reduce", size, pl)
        assert algo == "ring"
        assert t >= auto.time("all_reduce", size, pl) * (1 - 1e-12)   # fewer choices: never faster
        assert t == pytest.approx(ring.time("all_reduce", size, pl))


def test_ring_on_two_nodes_is_bound_by_the_node_nics():
    """A ring over 2 nodes sends 2(n-1)/n of the buffer over each node's NICs each way: its bus bandwidth
    is at most the node's NIC bandwidth (what a p4d ring with 4 x 100 Gb/s EFA reaches: about 44 GB/s)."""
    c, ring, pl = _two_nodes("a100-40gb", algorithms=("ring",))
    node = c.node.model_copy(update={"nics_per_node": 4, "nic_bandwidth_bytes_per_s": 100e9 / 8})
    c = c.model_copy(update={"node": node})
    ring = NetworkPricer(c, profile_for(c.gpu), algorithms=("ring",))
    e_t = ring.time("all_reduce", 4 * GiB, pl)
    busbw = 4 * GiB * BUS_FACTOR["all_reduce"](16) / e_t
    assert busbw <= 4 * 100e9 / 8


def test_other_collectives_keep_their_ring():
    """NCCL: 'Never disable ring for non-allreduce operations' (tuning.cc): NCCL_ALGO=Tree still runs an
    all-gather, as a ring."""
    _, tree, pl = _two_nodes(algorithms=("tree",))
    algo, _proto, t = tree.choose("all_gather", 64 * MiB, pl)
    assert algo == "ring" and t > 0
    assert tree.choose("all_reduce", 64 * MiB, pl)[0] == "tree"


def test_an_algorithm_the_node_lacks_leaves_nothing():
    c = cluster_for_gpu("a100-80gb", 8)
    p = NetworkPricer(c, profile_for(c.gpu), algorithms=("nvls",))
    with pytest.raises(SpecError) as e:
        p.time("all_reduce", MiB, place_group(8, 1, 8))
    assert e.value.field == "algorithms"


@pytest.mark.parametrize("algos", [("bogus",), ()])
def test_unknown_or_empty_algorithm_list_is_refused(algos):
    c = cluster_for_gpu("h100-sxm", 8)
    with pytest.raises(SpecError) as e:
        NetworkPricer(c, profile_for(c.gpu), algorithms=algos)
    assert e.value.field == "algorithms"


def test_documented_job_settings_of_the_runs():
    assert nccl_env_of({"run_id": "aws-p4d-2node-eks-allreduce", "algorithm": ""}) == (("ring",), None)
    assert nccl_env_of({"run_id": "gcp-a3mega-2node-allreduce", "algorithm": ""}) == (("ring", "tree"), ("simple",))
    # a run that forced an algorithm says so in its own column
    assert nccl_env_of({"run_id": "azure-ndh100v5-1vm-allreduce", "algorithm": "nvls"}) == (("nvls",), None)
    assert nccl_env_of({"run_id": "aws-p4de-2node-allreduce", "algorithm": ""}) == (None, None)


def test_p4d_eks_large_messages_run_the_ring_within_the_bar():
    rows = [r for r in compare(CSV) if r.run_id == "aws-p4d-2node-eks-allreduce" and r.nbytes >= GiB]
    assert rows and all(r.algorithm == "ring" for r in rows)
    assert all(abs(r.measured_s / r.model_s - 1) <= 0.10 for r in rows)


def test_a3_mega_runs_without_nvls():
    rows = [r for r in compare(CSV) if r.run_id == "gcp-a3mega-2node-allreduce"]
    assert rows and all(r.algorithm in ("ring", "tree") and r.protocol == "simple" for r in rows)
    big = [r.measured_s / r.model_s - 1 for r in rows if r.nbytes >= GiB]
    assert big and all(abs(b) <= 0.10 for b in big)


def test_cluster_of_is_unchanged_by_the_settings():
    """The job settings change NCCL's choices, not the hardware the row ran on."""
    row = {"run_id": "gcp-a3mega-2node-allreduce", "gpu": "h100-sxm", "num_gpus": "16", "gpus_per_node": "8",
           "nodes": "2", "interconnect": "NVSwitch NVLink4 intra-node; GPUDirect-TCPXO"}
    assert cluster_of(row).node.nics_per_node == 8


def test_a_2021_efa_plugin_leaves_nccl_all_protocols():
    """aws-ofi-nccl began setting NCCL_PROTO=simple in 2023: the 2021 p4d EKS run's nodes are not marked, so
    NCCL (2.9.9) takes LL for small messages there, while a later p4de run stays Simple."""
    eks = {"run_id": "aws-p4d-2node-eks-allreduce", "gpu": "a100-40gb", "num_gpus": "16", "gpus_per_node": "8",
           "nodes": "2", "interconnect": "NVSwitch NVLink3 intra-node; 4x100Gb/s EFA per node (400 Gbps)"}
    p4de = {**eks, "run_id": "aws-p4de-2node-allreduce", "gpu": "a100-80gb"}
    assert cluster_of(eks).node.nic_ordered_128b_delivery
    assert not cluster_of(p4de).node.nic_ordered_128b_delivery
    small = [r for r in compare(CSV) if r.run_id == "aws-p4d-2node-eks-allreduce" and r.nbytes <= 1024]
    assert small and all(r.protocol == "ll" for r in small)
