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


def register(app: typer.Typer) -> None:
    from .. import cli as base

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
                   as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
        """One NCCL collective priced as the training model prices it: time, algorithm and bus
        bandwidth (nccl-tests' definitions), the algorithm and protocol NCCL would pick."""
        from rich.table import Table
        from ..errors import SpecError
        from ..jobs import resolve_cluster
        from .collective import parse_size, parse_sweep, price_collective, sweep
        op_name = op.strip().lower().replace("-", "_")
        algo = algorithm.strip().lower()
        if (size is None) == (sweep_sizes is None):
            raise SpecError("bytes", "give one of --bytes and --sweep", 'e.g. --bytes 1GiB or --sweep "1KiB:16GiB"')
        sizes = parse_sweep(sweep_sizes) if sweep_sizes is not None else [parse_size(size or "", "bytes")]
        if num_gpus is not None and num_gpus < 2:
            raise SpecError("num_gpus", f"a collective needs at least 2 GPUs, got {num_gpus}", "give --num-gpus 2 or more")
        if num_gpus is None and cluster is None:
            c = resolve_cluster(gpu, None, None, gpus_per_node)
            c = c.with_gpus(c.gpus_per_node)
        else:
            c = resolve_cluster(gpu, num_gpus, cluster, gpus_per_node)
        n = num_gpus or c.num_gpus
        rows = sweep(c, op_name, sizes, n, algo) if sweep_sizes is not None \
            else [price_collective(c, op_name, sizes[0], n, algo)]
        if as_json:
            head = {"schema": 1, "gpu": c.gpu.name, "cluster": c.name}
            if sweep_sizes is None:
                base._emit_json({**head, **rows[0].to_json()})
            else:
                base._emit_json({**head, "op": op_name, "num_gpus": n, "rows": [r.to_json() for r in rows]})
            return
        r0 = rows[0]
        where = f"{n} x {c.gpu.name}, {r0.nodes} node{'s' if r0.nodes > 1 else ''} of {r0.ranks_per_node}"
        t = Table(title=f"{op_name} on {where}", title_justify="left")
        for col, just in (("size", "right"), ("time", "right"), ("algbw GB/s", "right"), ("busbw GB/s", "right"),
                          ("algorithm/protocol", "left")):
            t.add_column(col, justify=just)   # type: ignore[arg-type]
        for r in rows:
            t.add_row(_size(r.nbytes), f"{r.time_s * 1e6:,.1f} us", _gbps(r.algbw_bytes_per_s),
                      _gbps(r.busbw_bytes_per_s), f"{r.algorithm}/{r.protocol}")
        base.console.print(t)
