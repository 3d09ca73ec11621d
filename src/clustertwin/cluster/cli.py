"""`clustertwin collective` (and `clustertwin place`): the cluster's commands."""
from __future__ import annotations

from typing import Optional

import typer

from .. import cli_options as opts


def _gbps(x: float) -> str:
    return f"{x / 1e9:,.1f}"


def _size(b: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b:g} B"


MAX_MESSAGE_BYTES = 1 << 40   # assumed: 1 TiB, several times the largest GPU memory (B300: 288 GB), so only nonsense is refused


def register(app: typer.Typer) -> None:
    from .. import cli as base
    register_place(app)

    @app.command()
    def collective(op: str = typer.Option(..., "--op", help="all_reduce | all_gather | reduce_scatter | all_to_all | "
                                                           "broadcast | send_recv"),
                   size: Optional[str] = typer.Option(None, "--bytes", help='message size (nccl-tests "size"), e.g. '
                                                      '"1GiB", "16MiB", 4096'),
                   gpu: Optional[str] = opts.GpuOpt,
                   num_gpus: Optional[int] = typer.Option(None, "--num-gpus", "-n",
                                                          help="ranks [default: one node, or the whole --cluster]"),
                   gpus_per_node: Optional[int] = opts.GpnOpt, cluster: Optional[str] = opts.ClusterOpt,
                   algorithm: str = typer.Option("auto", "--algorithm",
                                                 help="auto (NCCL's pick) | ring | tree | nvls | collnet | pat"),
                   sweep_sizes: Optional[str] = typer.Option(None, "--sweep", help='sizes MIN:MAX[:FACTOR], e.g. '
                                                             '"1KiB:16GiB" (each twice the last)'),
                   nccl_algo: Optional[str] = typer.Option(None, "--nccl-algo", help='NCCL_ALGO as NCCL takes it: '
                                                           'a comma list of Ring, Tree, NVLS, NVLSTree, PAT, '
                                                           'CollNetDirect, CollNetChain, or ^LIST for all but '
                                                           'those (overrides the cluster file\'s nccl_env)'),
                   nccl_proto: Optional[str] = typer.Option(None, "--nccl-proto", help='NCCL_PROTO as NCCL takes it: '
                                                            'a comma list of LL, LL128, Simple, or ^LIST'),
                   as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
        """One NCCL collective priced as the training model prices it: time, algorithm and bus
        bandwidth (nccl-tests' definitions), the algorithm and protocol NCCL would pick."""
        from rich.table import Table
        from ..errors import SpecError
        from ..jobs import resolve_cluster
        from .collective import parse_size, parse_sweep, price_collective, sweep, with_nccl_env
        op_name = op.strip().lower().replace("-", "_")
        algo = algorithm.strip().lower()
        if (size is None) == (sweep_sizes is None):
            raise SpecError("bytes", "give one of --bytes and --sweep", 'e.g. --bytes 1GiB or --sweep "1KiB:16GiB"')
        sizes = parse_sweep(sweep_sizes) if sweep_sizes is not None else [parse_size(size or "", "bytes")]
        if max(sizes) > MAX_MESSAGE_BYTES:   # no GPU holds such a buffer: a typo (1e30) or a wrong unit
            raise SpecError("sweep" if sweep_sizes is not None else "bytes",
                            f"{_size(max(sizes))} is larger than any GPU's memory",
                            'give at most 1TiB per rank, e.g. "1GiB"')
        if num_gpus is not None and num_gpus < 2:
            raise SpecError("num_gpus", f"a collective needs at least 2 GPUs, got {num_gpus}", "give --num-gpus 2 or more")
        if num_gpus is None and cluster is None:
            c = resolve_cluster(gpu, None, None, gpus_per_node)
            c = c.with_gpus(c.gpus_per_node)
        else:
            c = resolve_cluster(gpu, num_gpus, cluster, gpus_per_node)
        c = with_nccl_env(c, nccl_algo, nccl_proto)
        n = num_gpus or c.num_gpus
        rows = sweep(c, op_name, sizes, n, algo) if sweep_sizes is not None \
            else [price_collective(c, op_name, sizes[0], n, algo)]
        if as_json:
            head = {"schema": 1, "gpu": c.gpu.name, "cluster": c.name}
            if c.nccl_env is not None and not c.nccl_env.is_default:
                head["nccl_env"] = c.nccl_env.to_json()
            if sweep_sizes is None:
                base._emit_json({**head, **rows[0].to_json()})
            else:
                base._emit_json({**head, "op": op_name, "num_gpus": n, "rows": [r.to_json() for r in rows]})
            return
        r0 = rows[0]
        where = f"{n} x {c.gpu.name}, {r0.nodes} node{'s' if r0.nodes > 1 else ''} of {r0.ranks_per_node}"
        if c.nccl_env is not None and not c.nccl_env.is_default:
            where += " with " + " ".join(f"{k}={v}" for k, v in c.nccl_env.to_json().items())
        t = Table(title=f"{op_name} on {where}", title_justify="left")
        for col, just in (("size", "right"), ("time", "right"), ("algbw GB/s", "right"), ("busbw GB/s", "right"),
                          ("algorithm/protocol", "left")):
            t.add_column(col, justify=just)   # type: ignore[arg-type]
        for r in rows:
            t.add_row(_size(r.nbytes), f"{r.time_s * 1e6:,.1f} us", _gbps(r.algbw_bytes_per_s),
                      _gbps(r.busbw_bytes_per_s), f"{r.algorithm}/{r.protocol}")
        base.console.print(t)


def register_place(app: typer.Typer) -> None:
    from .. import cli as base

    @app.command()
    def place(jobs_file: str = typer.Argument(..., metavar="JOBS.yaml", help="the jobs (docs/cluster.md)"),
              cluster: str = typer.Option(..., "--cluster", help="cluster preset or YAML/JSON file"),
              policy: str = typer.Option("topology-aware", "--policy",
                                         help="packed | spread | topology-aware | shape-folding (torus + OCS)"),
              trace: Optional[str] = typer.Option(None, "--trace", help="write a Perfetto JSON of who shares which "
                                                  "link to this file"),
              as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
        """Place several training jobs on one cluster: each job's nodes and leaves, its slowdown from
        sharing leaf uplinks with the others, utilization, fragmentation and completion times."""
        import json
        from pathlib import Path
        from rich.table import Table
        from ..catalog import load_cluster
        from .placement import perfetto, place_jobs, read_jobs
        if Path(jobs_file).is_dir():
            from ..errors import DataError
            raise DataError("jobs", f"{jobs_file!r} is a directory", "give a YAML file with a jobs: list (docs/cluster.md)")
        reqs = read_jobs(jobs_file)
        res = place_jobs(load_cluster(cluster), reqs, policy.strip().lower())
        if trace:
            from ..errors import SpecError
            try:
                Path(trace).write_text(json.dumps(perfetto(res)), encoding="utf-8")
            except OSError as e:
                raise SpecError("trace", f"cannot write {trace!r} ({e.strerror or e})",
                                "give a file in a directory that exists and is writable") from None
        if as_json:
            base._emit_json(res.to_json())
            return
        from rich import box
        t = Table(title=f"{len(res.jobs)} jobs on {res.cluster} ({res.num_nodes} nodes, {res.policy})",
                  title_justify="left", box=box.SIMPLE_HEAD)
        plural = {"leaf": "leaves", "ocs block": "blocks", "torus row": "rows"}[res.domain]
        for col in ("job", "nodes", plural, "start", "end", "step alone", "slowdown"):
            t.add_column(col, justify="left" if col == "job" else "right", no_wrap=True)
        lines = []
        for j in res.jobs:
            shared = sorted({x for v in j.sharing.values() for x in v})
            leaves = ",".join(map(str, j.leaves)) if len(j.leaves) <= 4 else f"{j.leaves[0]}..{j.leaves[-1]} ({len(j.leaves)})"
            slow = 0.0 if abs(j.slowdown) < 5e-4 else j.slowdown
            t.add_row(j.name, str(len(j.nodes)), leaves, _dur(j.start_s), _dur(j.end_s), f"{j.step_time_alone_s:.2f} s",
                      f"{slow:+.1%}")
            if shared:
                groups = ", ".join(sorted(j.sharing, key=lambda g: (g.split()[0], int(g.split()[1]))))
                lines.append(f"{j.name} shares the uplinks of {groups} with {', '.join(shared)} "
                             f"(demand up to {j.worst_taper:.2f}x their bandwidth)")
        base.console.print(t)
        for line in lines:
            base.console.print(line, highlight=False)
        base.console.print(f"makespan {_dur(res.makespan_s)}, utilization {res.utilization:.0%}, "
                           f"fragmentation {res.fragmentation:.0%}"
                           + (f"; not placed: {', '.join(res.unplaced)}" if res.unplaced else ""))


def _dur(s: float) -> str:
    from ..units import format_duration
    return format_duration(s) if s > 0 else "0"
