"""`clustertwin serve` and `clustertwin serve-search`: the serving twin on the command line."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..cli_options import ClusterOpt, GpnOpt, GpuOpt, ModelOpt
from ..progress import progress_bar

console = Console()

SERVE_PLAN_HELP = 'parallel sizes of one replica and the replica count, e.g. "tp=8,pp=1,ep=1,dp=1" [dp: every GPU]'


# assumed: the simulator steps every engine iteration in Python; 100,000 requests of a few hundred tokens take
# tens of seconds on one core, 10 million take hours, and p99 latencies settle within a few thousand requests
CLI_MAX_REQUESTS = 100_000


def _check_num_requests(n: Optional[int], concurrency: Optional[int] = None) -> None:
    from ..errors import SpecError
    if n is not None and n > CLI_MAX_REQUESTS:
        raise SpecError("num_requests", f"{n:,} requests are more than the simulator steps through in minutes",
                        f"give at most {CLI_MAX_REQUESTS:,}; percentiles settle within a few thousand")
    if n is None and concurrency is not None and 10 * concurrency > CLI_MAX_REQUESTS:   # run.py's default: 10 x
        raise SpecError("concurrency", f"{concurrency:,} in flight would simulate {10 * concurrency:,} requests "
                        "by default", f"give --num-requests (at most {CLI_MAX_REQUESTS:,}) or a lower --concurrency")


def _check_seed(seed: int) -> None:
    from ..errors import SpecError
    if seed < 0:
        raise SpecError("seed", f"{seed} is negative", "give 0 or a positive integer, e.g. --seed 0")


def _check_search_inputs(slo: str, gpus: tuple, prices: dict, num_requests: int) -> None:
    """serve-search's own flags, each refused in one line before any configuration is priced."""
    from ..errors import SpecError
    from .run import MAX_REQUESTS
    for part in slo.split(","):
        key, eq, val = part.partition("=")
        try:
            float(val.strip())
        except ValueError:
            continue
        if eq:          # a bare number: seconds or milliseconds? refuse rather than guess
            raise SpecError(f"slo.{key.strip().lower()}", f"{val.strip()!r} has no unit",
                            f'write e.g. "{val.strip()}s" or "{val.strip()}ms"')
    if not gpus:
        raise SpecError("gpus", "no GPU type given", "give e.g. --gpus h100-sxm,h200")
    for k, v in prices.items():
        if not (math.isfinite(v) and v > 0):
            what = "every GPU" if k == "*" else k
            raise SpecError("gpu_hour_price", f"{v:g} USD per GPU-hour for {what} is not a price",
                            'give a positive price, e.g. "2.5" or "h100-sxm=2.5"')
    if not 1 <= num_requests <= MAX_REQUESTS:
        raise SpecError("num_requests", f"{num_requests} must lie in 1 .. {MAX_REQUESTS:,}", "give a request count")


def _check_length_sources(dataset_file, dataset, input_len, output_len) -> None:
    """One source of request lengths: a file's rows, a named distribution (whose mean output --output-len
    may set) or --input-len/--output-len; a second one given alongside would be ignored, so refuse it."""
    from ..errors import SpecError
    if dataset_file is not None:
        for flag, v in (("dataset", dataset), ("input_len", input_len), ("output_len", output_len)):
            if v is not None:
                raise SpecError(flag, "given with --dataset-file, whose rows set every request's lengths",
                                f"drop --{flag.replace('_', '-')} or --dataset-file")
    elif dataset is not None and input_len is not None:
        raise SpecError("input_len", f"given with --dataset {dataset}, whose prompt lengths it would not change",
                        "drop --input-len (--output-len sets the mean output of a dataset)")


def _write_page(path: Path, text: str) -> None:
    from ..errors import SpecError
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise SpecError("html", f"cannot write {str(path)!r} ({e.strerror or e})",
                        "give a file in a directory that exists and is writable") from None


def _emit(data: dict) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=float) + "\n")


def _ms(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x * 1e3:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def serve_tables(r) -> list:
    """The tables `serve` prints (80 columns)."""
    from ..report.console import Col, Fit
    s, mem = r.setup, r.memory
    head = (f"{s.model.name} on {s.num_gpus} x {s.cluster.gpu.name}, tp={s.tp} pp={s.pp} ep={s.ep} dp={s.dp}, "
            f"{s.engine.name}, {s.precision} (KV {s.kv_dtype}), {r.workload}")
    out: list = [head]
    gib = 2.0 ** 30
    mrows = [("weights", f"{mem.weight_bytes / gib:,.1f} GiB"), ("activations", f"{mem.activation_bytes / gib:,.1f} GiB"),
             ("engine other", f"{mem.other_bytes / gib:,.1f} GiB"), ("KV cache", f"{mem.kv_cache_bytes / gib:,.1f} GiB"),
             ("KV tokens", f"{mem.kv_cache_tokens:,}"), ("concurrent seqs", f"{r.max_concurrent_requests:,}")]
    out.append(Fit([Col("memory per GPU", style="bold"), Col("", "right")], mrows, None))
    if not r.fits:
        out.append(f"does not fit: {mem.reason or 'a request never finished'}")
        return out
    n = s.num_gpus
    trows = [("output tokens/s", f"{r.output_tokens_per_s:,.0f}", f"{r.output_tokens_per_s / n:,.0f}"),
             ("total tokens/s", f"{r.total_tokens_per_s:,.0f}", f"{r.total_tokens_per_s / n:,.0f}"),
             ("requests/s", f"{r.requests_per_s:,.2f}", f"{r.requests_per_s / n:,.3f}")]
    out.append(Fit([Col("throughput", style="bold"), Col("system", "right"), Col("per GPU", "right")], trows))
    lrows = []
    for label, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("ITL", "itl_s"), ("end-to-end", "e2e_latency_s")):
        d = r.latency(key)
        lrows.append((label, _ms(d["mean"]), _ms(d["p50"]), _ms(d["p90"]), _ms(d["p99"])))
    out.append(Fit([Col("latency", style="bold"), Col("mean", "right"), Col("p50", "right"), Col("p90", "right"),
                    Col("p99", "right")], lrows))
    brows = []
    for label, c in (("prefill", r.prefill_step), ("decode", r.decode_step)):
        if c is None or c.total_s <= 0:
            continue
        b = c.breakdown()
        brows.append((label, _ms(c.total_s), *(f"{100 * v / c.total_s:.0f}%" for v in b.values())))
    out.append(Fit([Col("step", style="bold"), Col("time", "right"), Col("gemm", "right"), Col("attn", "right"),
                    Col("mem-\nbound", "right"), Col("comm", "right"), Col("over-\nhead", "right")], brows,
                   caption="prefill: one median prompt; decode: a full batch at the median context"))
    sim = r.sim
    out.append(f"energy {r.energy_per_output_token_j:.2f} J per output token · {len(sim.requests):,} requests in "
               f"{sim.duration_s:,.1f} s · {sim.preemptions:,} preemptions")
    return out


def search_tables(res) -> list:
    from ..report.console import Col, Fit
    rows = []
    for c in res.ranked[:10]:
        t = c.result.latency("ttft_s")["p99"]
        p = c.result.latency("tpot_s")["p99"]
        cost = f"${c.cost_per_hour:,.2f}" if c.cost_per_hour is not None else "-"
        rows.append((c.gpu, f"{c.tp}/{c.pp}/{c.ep}", str(c.max_num_seqs), str(c.replicas), str(c.gpus), cost,
                     _ms(t), _ms(p)))
    cols = [Col("gpu"), Col("tp/pp/ep"), Col("batch\nmax", "right"), Col("repl-\nicas", "right"), Col("GPUs", "right"),
            Col("$/hour", "right", drop=1), Col("TTFT\np99", "right"), Col("TPOT\np99", "right")]
    slo = ", ".join(f"{m.replace('_s', '')}_{k}<={_ms(v)}" for m, d in res.slo.items() for k, v in d.items())
    out: list = [Fit(cols, rows, f"configurations meeting {slo} at {res.request_rate:g} req/s, by {res.rank_by}",
                     caption=f"{len(res.rejected)} candidates miss the SLO or do not fit")]
    if not res.ranked:
        out.append("no configuration meets the SLO: relax it, lower the rate, or allow more replicas")
    return out


def serving_validation_tables(rep) -> list:
    """Per-row errors and the MAPE per metric family of a serving validation (80 columns)."""
    from ..report.console import Col, Fit
    rows = []
    for r in rep.rows:
        if r.error is None:
            rows.append((r.run_id, r.metric, f"{r.measured:.4g}", "-", r.reason or "not predicted"))
        else:
            rows.append((r.run_id, r.metric, f"{r.measured:.4g}", f"{r.predicted:.4g}", f"{100 * r.error:+.1f}%"))
    out: list = [Fit([Col("run", flex="cut"), Col("metric", flex="cut"), Col("measured", "right"),
                      Col("predicted", "right"), Col("error", flex="wrap")], rows, "serving runs")]
    fam = [(f, f"{100 * rep.mape(f):.1f}%" if rep.mape(f) == rep.mape(f) else "-",
            str(sum(1 for r in rep.ok_rows if (r.metric in _THROUGHPUT) == (f == "throughput"))))
           for f in ("throughput", "latency")]
    out.append(Fit([Col("MAPE", style="bold"), Col("", "right"), Col("rows", "right")], fam))
    out.append(f"{len(rep.ok_rows)} rows predicted, {len(rep.failed_rows)} not (reasons above); "
               "nothing fitted to them")   # a line of its own: as a caption it wraps to the narrow table
    return out


_THROUGHPUT = ("output_tokens_per_s", "output_tokens_per_s_per_gpu", "total_tokens_per_s", "requests_per_s")


def validate_serving_files(files: list[Path], *, cv: Optional[str] = None, as_json: bool = False) -> None:
    """`clustertwin validate` on serving files: every row predicted by the serving twin or given its reason."""
    from ..errors import DataError
    from ..report.console import print_all
    from ..validate.serving import read_serving_runs, validate_serving
    if cv is not None and cv.strip().lower() != "source":
        raise DataError("cv", f"unknown grouping {cv!r}", "use --cv source (leave-one-source-out)")
    rows = []
    for f in files:
        got = read_serving_runs(f)
        if not got:
            raise DataError("file", f"{Path(f).name} has a header but no runs", "add one row per measured metric "
                            "(columns: data/validation/README.md)")
        rows += got
    with progress_bar("predicting serving runs", quiet=as_json) as update:
        rep = validate_serving(rows, progress=update)
    if as_json:
        _emit(rep.to_json())
        return
    print_all(console, serving_validation_tables(rep))
    if cv is not None:
        by = rep.mape_by(lambda r: r.source or "?")
        console.print("MAPE by source (the serving twin fits nothing to measured rows: every figure is out of "
                      "sample): " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in by.items()))


def register(app: typer.Typer) -> None:

    @app.command("serve")
    def serve_cmd(
            model: Optional[str] = ModelOpt, gpu: Optional[str] = GpuOpt,
            num_gpus: Optional[int] = typer.Option(None, "--num-gpus", "-n", help="GPUs serving [default: tp x pp x "
                                                   "dp of --plan; 1 without a plan]"),
            gpus_per_node: Optional[int] = GpnOpt, cluster: Optional[str] = ClusterOpt,
            plan: Optional[str] = typer.Option(None, "--plan", "-p", help=SERVE_PLAN_HELP),
            engine: str = typer.Option("vllm", "--engine", help="vllm | sglang | trtllm"),
            precision: str = typer.Option("bf16", "--precision", help="bf16 | fp16 | fp8 | int4-awq | nvfp4"),
            kv_cache_dtype: Optional[str] = typer.Option(None, "--kv-cache-dtype", help="bf16 | fp16 | fp8 [engine default]"),
            input_len: Optional[int] = typer.Option(None, "--input-len", help="prompt tokens per request [1024]"),
            output_len: Optional[int] = typer.Option(None, "--output-len", help="output tokens per request [128]"),
            dataset_file: Optional[Path] = typer.Option(None, "--dataset-file",
                                                        help="CSV/JSONL: arrival_time (optional), input_len, output_len"),
            dataset: Optional[str] = typer.Option(None, "--dataset", help="named length distribution: sharegpt "
                                                  "(docs/serving.md; --output-len overrides its mean output)"),
            concurrency: Optional[int] = typer.Option(None, "--concurrency", help="closed loop: requests in flight"),
            request_rate: Optional[float] = typer.Option(None, "--request-rate", help="open loop: Poisson requests/s"),
            workload: Optional[str] = typer.Option(None, "--workload",
                                                   help="offline | concurrency | poisson | static | trace [from the above]"),
            num_requests: Optional[int] = typer.Option(None, "--num-requests", help="requests to simulate [1000]"),
            max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="engine batch limit [engine's]"),
            max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens",
                                                                 help="tokens per iteration [engine's]"),
            disaggregate: Optional[str] = typer.Option(None, "--disaggregate",
                                                       help='prefill:decode replicas, e.g. "1:1" (dp split)'),
            num_scheduler_steps: Optional[int] = typer.Option(None, "--num-scheduler-steps",
                                                              help="decode iterations per scheduling decision "
                                                              "(vLLM multi-step) [1]"),
            enforce_eager: bool = typer.Option(False, "--enforce-eager", help="no CUDA graphs"),
            no_chunked_prefill: bool = typer.Option(False, "--no-chunked-prefill",
                                                    help="prefill each prompt whole in one iteration "
                                                    "(vLLM --enable-chunked-prefill=False)"),
            seed: int = typer.Option(0, "--seed", help="seed of the arrival process"),
            html: Optional[Path] = typer.Option(None, "--html", help="also write a page: latency distributions "
                                                "and the throughput-latency curve over request rate"),
            as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
        """Simulate LLM serving request by request: throughput, TTFT, TPOT, ITL, end-to-end latency,
        KV-cache capacity, memory per GPU and energy per token."""
        from ..report.console import print_all
        from .run import ServeRequest, predict_serving
        _check_seed(seed)
        _check_num_requests(num_requests, concurrency)
        _check_length_sources(dataset_file, dataset, input_len, output_len)
        if html is not None and (html.is_dir() or not html.resolve().parent.is_dir()):   # before minutes of pricing
            _write_page(html, "")
        q = ServeRequest(model=model or "llama3-8b", gpu=gpu, num_gpus=num_gpus, cluster=cluster,
                         gpus_per_node=gpus_per_node, plan=plan, engine=engine, precision=precision,
                         kv_cache_dtype=kv_cache_dtype, input_len=input_len, output_len=output_len,
                         dataset_file=dataset_file, dataset=dataset, concurrency=concurrency,
                         request_rate=request_rate, workload=workload, num_requests=num_requests, max_num_seqs=max_num_seqs,
                         max_num_batched_tokens=max_num_batched_tokens, disaggregate=disaggregate, seed=seed,
                         num_scheduler_steps=num_scheduler_steps, enforce_eager=enforce_eager,
                         chunked_prefill=False if no_chunked_prefill else None)
        r = predict_serving(q)
        if html is not None:
            from ..report.serving import render_serving_html
            from .curve import serving_view_data
            with progress_bar("serving view: request rates", quiet=as_json) as update:
                data = serving_view_data(q, progress=update)
            _write_page(html, render_serving_html(data))
        if as_json:
            _emit(r.to_json())
            return
        print_all(console, serve_tables(r))
        if html is not None:
            console.print(f"wrote {html}")

    @app.command("serve-search")
    def serve_search_cmd(
            model: Optional[str] = ModelOpt,
            slo: str = typer.Option(..., "--slo", help='latency targets, e.g. "ttft_p99=2s,tpot_p99=50ms"'),
            request_rate: float = typer.Option(..., "--request-rate", help="requests/s the deployment must serve"),
            gpus: str = typer.Option("h100-sxm,h200,a100-80gb,b200", "--gpus", help="GPU types to consider"),
            batch: str = typer.Option("64,256", "--max-num-seqs", help="engine batch limits to consider"),
            engine: str = typer.Option("vllm", "--engine", help="vllm | sglang | trtllm"),
            precision: str = typer.Option("bf16", "--precision", help="bf16 | fp16 | fp8 | int4-awq | nvfp4"),
            kv_cache_dtype: Optional[str] = typer.Option(None, "--kv-cache-dtype", help="bf16 | fp16 | fp8"),
            input_len: Optional[int] = typer.Option(None, "--input-len", help="prompt tokens per request [1024]"),
            output_len: Optional[int] = typer.Option(None, "--output-len", help="output tokens per request [128]"),
            dataset_file: Optional[Path] = typer.Option(None, "--dataset-file", help="CSV/JSONL of request lengths"),
            num_requests: int = typer.Option(200, "--num-requests", help="requests simulated per configuration"),
            rank_by: str = typer.Option("gpus", "--rank-by", help="gpus | cost"),
            gpu_hour_price: Optional[str] = typer.Option(None, "--gpu-hour-price",
                                                         help='USD per GPU-hour: "2.5" or "h100-sxm=2.5,h200=3.5"'),
            max_replicas: int = typer.Option(64, "--max-replicas", help="replicas tried at most"),
            seed: int = typer.Option(0, "--seed", help="seed of the arrival process"),
            as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)"),
            quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar")) -> None:
        """Find the cheapest serving configuration (GPU type, tp/pp/ep, replicas, batch limit) meeting
        latency targets at a request rate."""
        from ..errors import SpecError
        from ..report.console import print_all
        from .run import ServeRequest
        from .search import parse_prices, parse_slo, serve_search
        gpu_list = tuple(g.strip() for g in gpus.split(",") if g.strip())
        prices = parse_prices(gpu_hour_price)
        _check_search_inputs(slo, gpu_list, prices, num_requests)
        _check_num_requests(num_requests)
        _check_length_sources(dataset_file, None, input_len, output_len)
        _check_seed(seed)
        targets = parse_slo(slo)
        try:
            seqs = tuple(int(x) for x in batch.split(",") if x.strip())
        except ValueError:
            raise SpecError("max_num_seqs", f"{batch!r} is not a list of integers", 'write e.g. "64,256"') from None
        if not seqs or min(seqs) < 1:
            raise SpecError("max_num_seqs", f"{batch!r} needs positive batch limits", 'write e.g. "64,256"')
        if max_replicas < 1:
            raise SpecError("max_replicas", f"{max_replicas} must be at least 1", "give a replica cap")
        base = ServeRequest(model=model or "llama3-8b", engine=engine, precision=precision,
                            kv_cache_dtype=kv_cache_dtype, input_len=input_len, output_len=output_len,
                            dataset_file=dataset_file, num_requests=num_requests, seed=seed)
        with progress_bar("pricing configurations", quiet=quiet) as update:
            res = serve_search(base, targets, request_rate, gpus=gpu_list,
                               seqs=seqs, rank_by=rank_by, prices=prices,
                               max_replicas=max_replicas, progress=update)
        if as_json:
            _emit(res.to_json())
            return
        print_all(console, search_tables(res))
