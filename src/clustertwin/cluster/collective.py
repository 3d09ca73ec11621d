"""`clustertwin collective`: one NCCL collective, or a sweep of message sizes, priced by the code the
training model prices its collectives with (``cost.network.NetworkPricer``), reported with
nccl-tests' definitions (doc/PERFORMANCE.md in NVIDIA/nccl-tests: algbw = size / time,
busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all,
1 for broadcast and send/recv).

>>> from clustertwin.catalog import cluster_for_gpu
>>> e = price_collective(cluster_for_gpu("a100-80gb", 8), "all_reduce", 1 << 30)
>>> (e.algorithm, e.protocol, round(e.busbw_bytes_per_s / e.algbw_bytes_per_s, 3))
('ring', 'simple', 1.75)
"""
from __future__ import annotations

import math

from ..cost.network import COLLECTIVES, CollectiveEstimate, NetworkPricer
from ..cost.profile import HardwareProfile
from ..errors import SpecError
from ..parallel.layout import GroupPlacement, place_group
from ..specs.hardware import ClusterSpec
from ..specs.nccl import NcclEnv, parse_nccl_list
from ..units import parse_quantity

MAX_SWEEP_POINTS = 64


def collective_placement(op: str, num_gpus: int, gpus_per_node: int) -> GroupPlacement:
    """Where nccl-tests' ranks sit: ``num_gpus`` consecutive ranks, a node filled before the next.
    send/recv (sendrecv_perf) shifts data one rank along the ring: the pair that bounds it crosses a
    node boundary when the ranks span nodes, and stays on NVLink otherwise."""
    pl = place_group(num_gpus, 1, gpus_per_node)
    if op == "send_recv":
        return GroupPlacement(2, 1, 2, 2) if pl.nodes > 1 else place_group(2, 1, gpus_per_node)
    return pl


def with_nccl_env(cluster: ClusterSpec, nccl_algo: str | None = None, nccl_proto: str | None = None) -> ClusterSpec:
    """``cluster`` with a job's NCCL_ALGO / NCCL_PROTO (``--nccl-algo``, ``--nccl-proto``) over its file's
    ``nccl_env``; each checked as NCCL parses it (SpecError naming the option)."""
    if nccl_algo is None and nccl_proto is None:
        return cluster
    env = cluster.nccl_env or NcclEnv()
    update: dict[str, object] = {}
    for text, var, field in ((nccl_algo, "NCCL_ALGO", "nccl_algo"), (nccl_proto, "NCCL_PROTO", "nccl_proto")):
        if text is not None:
            parse_nccl_list(text, var, field)
            update[var] = text.strip()
    env = env.model_copy(update=update)
    if env.algorithms is not None and not env.algorithms:
        raise SpecError("nccl_algo", f"{nccl_algo!r} with the cluster's NCCL_NVLS_ENABLE=0 leaves NCCL no algorithm",
                        "allow Ring or Tree")
    return cluster.model_copy(update={"nccl_env": env})


def _pricer(cluster: ClusterSpec, profile: HardwareProfile | None) -> NetworkPricer:
    if profile is None:
        from ..calibrate.profile import profile_for
        profile = profile_for(cluster.gpu)
    return NetworkPricer(cluster, profile)


def price_collective(cluster: ClusterSpec, op: str, nbytes: float, num_gpus: int | None = None,
                     algorithm: str = "auto", *, profile: HardwareProfile | None = None,
                     pricer: NetworkPricer | None = None) -> CollectiveEstimate:
    """One collective of ``nbytes`` (nccl-tests' size) on ``num_gpus`` GPUs of ``cluster`` (all of
    them by default), as the training model prices it."""
    n = cluster.num_gpus if num_gpus is None else num_gpus
    if op not in COLLECTIVES:
        raise SpecError("op", f"unknown collective {op!r}", f"use one of {', '.join(COLLECTIVES)}")
    if n < 2:
        raise SpecError("num_gpus", f"a collective needs at least 2 GPUs, got {n}", "give --num-gpus 2 or more")
    if n > cluster.num_gpus:
        raise SpecError("num_gpus", f"{n} GPUs do not fit on cluster {cluster.name} ({cluster.num_gpus} GPUs)",
                        "give fewer GPUs or a larger cluster")
    pricer = pricer or _pricer(cluster, profile)
    est = pricer.estimate(op, float(nbytes), collective_placement(op, n, cluster.gpus_per_node), algorithm)
    if op == "send_recv":   # nccl-tests reports sendrecv over all its ranks
        est = CollectiveEstimate(**{**est.__dict__, "num_gpus": n})
    return est


def parse_size(text: str, field: str = "bytes") -> int:
    """A message size in bytes from "1KiB", "16GiB", "1GB" or 4096: a positive whole number of bytes."""
    b = parse_quantity(text, "bytes", field)
    if b < 1 or b != math.floor(b):
        raise SpecError(field, f"{text!r} is not a positive whole number of bytes", 'e.g. "1KiB", "16MiB" or 4096')
    return int(b)


def parse_sweep(text: str) -> list[int]:
    """Sizes of a sweep "MIN:MAX" (each twice the last, as nccl-tests -f 2) or "MIN:MAX:FACTOR"."""
    parts = [p.strip() for p in str(text).split(":")]
    if len(parts) not in (2, 3):
        raise SpecError("sweep", f"cannot read {text!r}", 'write MIN:MAX or MIN:MAX:FACTOR, e.g. "1KiB:16GiB"')
    lo, hi = parse_size(parts[0], "sweep"), parse_size(parts[1], "sweep")
    factor = 2
    if len(parts) == 3:
        try:
            factor = int(parts[2])
        except ValueError:
            factor = 0
        if factor < 2:
            raise SpecError("sweep", f"factor {parts[2]!r} must be a whole number of 2 or more", 'e.g. "1KiB:16GiB:4"')
    if hi < lo:
        raise SpecError("sweep", f"{parts[1]} is below {parts[0]}", 'give MIN:MAX with MIN <= MAX, e.g. "1KiB:16GiB"')
    sizes = [lo]
    while sizes[-1] * factor <= hi:
        sizes.append(sizes[-1] * factor)
    if len(sizes) > MAX_SWEEP_POINTS:
        raise SpecError("sweep", f"{len(sizes)} sizes is too many", f"give at most {MAX_SWEEP_POINTS} (a larger factor)")
    return sizes


def sweep(cluster: ClusterSpec, op: str, sizes: list[int], num_gpus: int | None = None, algorithm: str = "auto",
          *, profile: HardwareProfile | None = None) -> list[CollectiveEstimate]:
    """``price_collective`` at each size (one pricer)."""
    pricer = _pricer(cluster, profile)
    return [price_collective(cluster, op, s, num_gpus, algorithm, pricer=pricer) for s in sizes]
