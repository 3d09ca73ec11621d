"""The collective model against published nccl-tests measurements (data/validation/nccl_tests.csv).

Each row is priced by ``NetworkPricer`` on a cluster built from the row: its GPU, ranks per node
and nodes, and where the source states them the NICs per node and their speed. Where it does not,
the assumption is in ``NIC_ASSUMED`` with its reason. The measured time is nccl-tests' "time"
column where printed, else the one its bus bandwidth implies (the nccl-tests definitions:
doc/PERFORMANCE.md, busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter
and all-to-all, 1 for send/recv).
"""
from __future__ import annotations

import csv
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..catalog import cluster_for_gpu
from ..cost.network import NetworkPricer, BUS_FACTOR
from ..calibrate.profile import profile_for
from ..cluster.collective import price_collective

# GPUs of the file the catalog names differently, and why
GPU_ALIAS = {
    "a100": ("a100-80gb", "the source does not state the memory size; the catalog's default A100"),
    "gb200": ("b200", "no GB200 in the catalog: B200 has the same NVLink 5 (900 GB/s per direction)"),
}

# NIC per node (count, bits/s) where the source does not state it, with the reason
NIC_ASSUMED = {
    "gcp-a3mega": (8, 200e9, "assumed: A3 Mega's 8 GPU NICs at 200 Gb/s (Google Cloud A3 Mega machine type); "
                             "the source names the NICs, not their speed"),
    "mscclpp-ndmv4": (8, 200e9, "assumed: Azure NDm A100 v4's 8 x 200 Gb/s HDR InfiniBand (the VM size's "
                                "documentation); the page does not state it"),
    "oci-h200": (8, 400e9, "assumed: 8 x 400 Gb/s ConnectX-7 (3.2 Tb/s RDMA per BM.GPU.H200.8 node); the "
                           "source names the NICs, not their speed"),
}


# latency a network plugin adds to every network step, as the plugin reports it to NCCL (ncclNetProperties
# latency, which NCCL's tuning.cc adds to each network step's latency, twice for Simple): run-id prefix ->
# (seconds, source). It becomes the row's node field net_plugin_latency_s, as the aws-p4d/aws-p4de presets
# carry it. GPUDirect-TCPXO reports 0 (google/nccl-plugin-gpudirect-tcpxo tcpdirect_plugin/fastrak_offload/
# nccl_shim.cc GetProperties: props.latency = 0), InfiniBand/RoCE (NCCL's own IB transport) none.
_AWS_OFI = ("aws/aws-ofi-nccl src/platform-aws.cpp (commit 2daf7d303aa139a03140aa530957d10521e4478d) "
            "platform_data_map")
NET_PLUGIN_LATENCY = {
    "aws-p4d": (75e-6, _AWS_OFI + ": p4d.24xlarge / p4de.24xlarge latency = 75.0 us"),
    "aws-p5": (75e-6, _AWS_OFI + ": p5/p5e latency = 75.0 us"),
}


# NICs that do not deliver 128-byte lines in order, where the row's fabric is such: run-id prefix -> source.
# EFA on p4d/p4de does not, and LL/LL128 rely on that ordering, so the plugin sets NCCL_PROTO=simple; on p5
# with its RDMA protocol it does not (aws/aws-ofi-nccl pull request 280, "aws: Do not force NCCL_PROTO=simple
# on P5"). The cluster says so (node field nic_ordered_128b_delivery: false) and NetworkPricer keeps NCCL to
# Simple there, as it does for a user's p4d/p4de cluster file.
_AWS_SIMPLE = ("aws/aws-ofi-nccl src/platform-aws.cpp (commit 2daf7d30) configure_ep_inorder: without "
               "FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES (p4d/p4de use the SENDRECV protocol) the plugin "
               "sets NCCL_PROTO=simple 'as the LL/LL128 protocols can lead to data corruption without data delivery "
               "ordering'; a p4d.24xlarge log shows it (aws/aws-ofi-nccl issue 715: 'Setting "
               "FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES not supported ... Setting NCCL_PROTO to \"simple\"'), "
               "and AWS's EFA guidance of 2021 made NCCL_PROTO=simple a must (aws/aws-ofi-nccl issue 76)")
UNORDERED_NICS = {
    "aws-p4d": _AWS_SIMPLE,
}


# NCCL_ALGO / NCCL_PROTO a run's documented job set, where its source gives them: run-id prefix ->
# (algorithm families, protocols or None, source). A row's own "algorithm" column (NCCL_ALGO of a run
# that forced one) is honoured the same way.
_EKS_P4D = ("aws-samples/aws-efa-eks examples/nccl-efa-tests.yaml at commit 9933d7f (2021-06-11, the commit "
            "that added the README's NCCL 2.9.9 launcher log): the MPIJob's mpirun passes '-x NCCL_ALGO=RING' "
            "and '-x FI_EFA_USE_DEVICE_RDMA=1', -np 16, 4 EFA devices per worker (the log's 8 rings each cross "
            "each node boundary once via NET/AWS Libfabric/<nic>/GDRDMA)")
_TCPXO = ("GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpxo/README.md, releases of Jun 27 2024 "
          "(plugin image v1.0.3) and Aug 06 2024 (v1.0.4), the images the run's startup scripts pull "
          "(lessizzmore/create-a3mega-ztan-fork startup_script.sh, startup_script_ubuntu.sh), whose "
          "nccl-env-profile.sh the run sources: NCCL_ALGO=Ring,Tree, NCCL_PROTO=Simple, NCCL_NVLS_ENABLE=0, "
          "NCCL_MIN_NCHANNELS=4, NCCL_BUFFSIZE=8388608, NCCL 2.21.5")
NCCL_ENV = {
    "aws-p4d-2node-eks": (("ring",), None, _EKS_P4D),
    "gcp-a3mega": (("ring", "tree"), ("simple",), _TCPXO),
}


def nccl_env_of(row: dict) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """(NCCL_ALGO families, NCCL_PROTO) of a row's run: its documented job settings, else the algorithm
    its "algorithm" column says was forced, else NCCL's defaults (None, None)."""
    for prefix, (algos, protos, _source) in NCCL_ENV.items():
        if row["run_id"].startswith(prefix):
            return algos, protos
    forced = (row.get("algorithm") or "").strip()
    return ((forced,) if forced and forced != "auto" else None), None


# Runs whose aws-ofi-nccl predates both of the plugin settings above: run-id prefix -> source. The plugin
# began setting NCCL_PROTO=simple in January 2023 and reporting a latency to NCCL in May 2023; a 2021 run
# got NCCL's default protocols and no plugin latency (NCCL 2.9.9's net API has no latency field).
_OFI_2021 = ("aws/aws-ofi-nccl: tags v1.1.2-aws (2021-04-13) and v1.1.3-aws (2021-06-18) setenv only "
             "NCCL_TOPO_FILE and RDMAV_FORK_SAFE (src/nccl_ofi_net.c); NCCL_PROTO=simple came with commit "
             "f62e4054 (2023-01-25, 'Also set the NCCL_PROTO to simple when appropriate'), the reported "
             "latency with 40110dc0 (2023-05-31, 'Variable internode latency reported to NCCL'); the run's "
             "log (NCCL 2.9.9, 2021-06-11) shows the plugin setting NCCL_TOPO_FILE and "
             "OFI_NCCL_GDR_FLUSH_DISABLE and no NCCL_PROTO")
PLUGIN_BEFORE_2023 = {
    "aws-p4d-2node-eks": _OFI_2021,
}


def _old_plugin(row: dict) -> bool:
    return any(row["run_id"].startswith(p) for p in PLUGIN_BEFORE_2023)


def _unordered_nics(row: dict) -> bool:
    """Whether the row's nodes talk over NICs without ordered 128-byte delivery (a multi-node EFA run on p4d/p4de)
    with a plugin that restricts NCCL to Simple for it (from 2023)."""
    return int(row["nodes"]) > 1 and any(row["run_id"].startswith(p) for p in UNORDERED_NICS) \
        and not _old_plugin(row)


def protocols_of(row: dict) -> tuple[str, ...] | None:
    """The NCCL protocols a row's cluster leaves NCCL (None: NCCL's default, all three)."""
    return ("simple",) if _unordered_nics(row) else None


@dataclass(frozen=True)
class Compared:
    run_id: str
    source: str
    gpu: str
    op: str
    num_gpus: int
    nodes: int
    nbytes: int
    measured_s: float
    model_s: float
    algorithm: str
    protocol: str

    @property
    def error(self) -> float:
        """Relative error of the modelled time against the measured (positive: model slower)."""
        return self.model_s / self.measured_s - 1.0

    @property
    def system(self) -> str:
        return f"{self.gpu} {self.nodes}x{self.num_gpus // self.nodes}"


def _nics(row: dict) -> tuple[int, float] | None:
    """(NICs per node, bits/s each) stated in the row's interconnect, else the assumption for its source."""
    m = re.search(r"(\d+)\s*x\s*(\d+)\s*Gb/s", row["interconnect"])
    if m:
        return int(m.group(1)), float(m.group(2)) * 1e9
    for prefix, (count, speed, _why) in NIC_ASSUMED.items():
        if row["run_id"].startswith(prefix):
            if row["run_id"].startswith("mscclpp-ndmv4-2node1"):
                return 1, speed           # one GPU per node: its own NIC
            return count, speed
    return None


def cluster_of(row: dict):
    """The cluster a row ran on, as the catalog can describe it."""
    gpu = GPU_ALIAS.get(row["gpu"], (row["gpu"], ""))[0]
    n, g = int(row["num_gpus"]), int(row["gpus_per_node"])
    cluster = cluster_for_gpu(gpu, n if n < g else n, gpus_per_node=g)
    nics = _nics(row)
    if nics and int(row["nodes"]) > 1:
        node = cluster.node.model_copy(update={"nics_per_node": nics[0], "nic_bandwidth_bytes_per_s": nics[1] / 8})
        cluster = cluster.model_copy(update={"node": node})
    if _unordered_nics(row):
        node = cluster.node.model_copy(update={"nic_ordered_128b_delivery": False})
        cluster = cluster.model_copy(update={"node": node})
    for prefix, (extra, _source) in NET_PLUGIN_LATENCY.items():
        if row["run_id"].startswith(prefix) and int(row["nodes"]) > 1:
            # the node's net plugin reports it to NCCL, on top of the cluster's NCCL LL128 ring step
            node = cluster.node.model_copy(update={"net_plugin_latency_s": extra})
            cluster = cluster.model_copy(update={"node": node})
    return cluster


def measured_time(row: dict) -> float | None:
    if row["time_s"]:
        return float(row["time_s"])
    busbw = float(row["busbw_bytes_per_s"] or 0)
    if busbw <= 0:
        return None
    n = int(row["num_gpus"])
    return float(row["bytes"]) * BUS_FACTOR[row["op"]](n) / busbw


def compare(path: str | Path) -> list[Compared]:
    """Every row of an nccl-tests CSV with a measured time, priced by the model."""
    out = []
    pricers: dict[str, NetworkPricer] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            t = measured_time(row)
            if t is None or t <= 0:
                continue
            cluster = cluster_of(row)
            algos, protos = nccl_env_of(row)
            key = repr((cluster, algos, protos))
            pricer = pricers.get(key)
            if pricer is None:
                pricer = pricers[key] = NetworkPricer(cluster, profile_for(cluster.gpu), protocols=protos,
                                                      algorithms=algos)
            n = int(row["num_gpus"])
            nbytes = float(row["bytes"])
            # the code path of `clustertwin collective` (and of the training model's collectives)
            est = price_collective(cluster, row["op"], nbytes, n, pricer=pricer)
            algo, proto, model = est.algorithm, est.protocol, est.time_s
            out.append(Compared(row["run_id"], row["source"].split(",")[0], row["gpu"], row["op"], n,
                                int(row["nodes"]), int(nbytes), t, model, algo, proto))
    return out


def size_band(nbytes: int) -> str:
    if nbytes < 1 << 20:
        return "< 1 MiB"
    if nbytes < 1 << 30:
        return "1 MiB - 1 GiB"
    return ">= 1 GiB"


def summary(rows: list[Compared], key) -> list[tuple[str, int, float, float, float]]:
    """(group, rows, median |error|, median error, worst |error|) per ``key(row)``."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r.error)
    return [(k, len(v), statistics.median(abs(e) for e in v), statistics.median(v), max(abs(e) for e in v))
            for k, v in groups.items()]
