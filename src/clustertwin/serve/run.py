"""One serving prediction: a model on GPUs with a plan and an engine, a workload of requests, and what
the simulation measures (throughput, TTFT, TPOT, ITL, end-to-end latency, KV cache, memory, energy).

>>> r = predict_serving(ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=1, input_len=512,
...                                  output_len=64, num_requests=50))
>>> r.fits, r.output_tokens_per_s > 0
(True, True)
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..constants import group, value
from ..errors import DataError, PlanError, SpecError
from ..specs.model import ModelSpec
from . import dataset, energy
from .engines import EngineProfile, engine_for_platform, engine_for_version, get_engine
from .sim import Requests, SimResult, Simulator, harness_batches, make_requests
from .workload import CHANNELWISE_FP8, KV_DTYPES, PRECISIONS, MemoryPlan, ServeSetup, StepCost, StepPricer, memory_plan, parse_serve_plan

MAX_TOKENS = 10_000_000        # a request longer than this is a typo, not a workload
MAX_REQUESTS = 10_000_000


@dataclass(frozen=True)
class ServeRequest:
    """What ``clustertwin serve`` is asked (None: not given)."""

    model: str | Path | ModelSpec = "llama3-8b"
    gpu: str | None = None
    num_gpus: int | None = None
    cluster: str | Path | None = None
    gpus_per_node: int | None = None
    plan: str | None = None
    engine: str = "vllm"
    engine_version: str | None = None   # the release, e.g. "0.7.3": applies serve.engines.VERSION_RULES
    engine_backend: str | None = None   # TensorRT-LLM's runtime: "pytorch" (trtllm-serve --backend pytorch)
    precision: str = "bf16"
    kv_cache_dtype: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    dataset_file: str | Path | None = None
    dataset: str | None = None      # a named length distribution (serve/dataset.py), e.g. "sharegpt"
    concurrency: int | None = None
    request_rate: float | None = None
    workload: str | None = None     # offline | concurrency | poisson | static | trace (default from the above)
    num_requests: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None     # vllm serve --max-model-len: sizes vLLM V0's unchunked token budget
    num_scheduler_steps: int | None = None   # vLLM multi-step scheduling (--num-scheduler-steps)
    # how a multi-step run's tokens reach the client: "run" (all at the run's end: one inter-token gap per
    # run) or "step" (each step's token as it is sampled: one gap per step); None: "run"
    multi_step_stream: str | None = None
    # a harness-side batcher between the load generator and the engines: (wait threshold s, batch size);
    # requests are handed over in batches, round-robin over the replicas (serve.sim.harness_batches)
    harness_batcher: tuple[float, int] | None = None
    enforce_eager: bool = False              # no CUDA graphs (vLLM --enforce-eager, SGLang --disable-cuda-graph)
    chunked_prefill: bool | None = None      # None: the engine's default; False: vLLM --enable-chunked-prefill=False
    disaggregate: str | None = None  # "P:D" prefill:decode replicas
    seed: int = 0


@dataclass
class ServeResult:
    setup: ServeSetup
    memory: MemoryPlan
    sim: SimResult | None
    workload: str
    assumptions: list[str] = field(default_factory=list)
    prefill_step: StepCost | None = None
    decode_step: StepCost | None = None

    @property
    def fits(self) -> bool:
        return self.memory.fits and self.sim is not None and bool(np.isfinite(self.sim.finish_s).all())

    def _tokens(self) -> tuple[float, float]:
        r = self.sim.requests if self.sim else None
        return (float(r.output_len.sum()), float(r.input_len.sum())) if r is not None else (0.0, 0.0)

    @property
    def output_tokens_per_s(self) -> float:
        if not self.fits:
            return 0.0
        return self._tokens()[0] / max(self.sim.duration_s, 1e-12)   # type: ignore[union-attr]

    @property
    def total_tokens_per_s(self) -> float:
        if not self.fits:
            return 0.0
        out, inp = self._tokens()
        return (out + inp) / max(self.sim.duration_s, 1e-12)   # type: ignore[union-attr]

    @property
    def requests_per_s(self) -> float:
        if not self.fits:
            return 0.0
        return len(self.sim.requests) / max(self.sim.duration_s, 1e-12)   # type: ignore[union-attr]

    @property
    def energy_per_output_token_j(self) -> float:
        if not self.fits:
            return float("nan")
        sim, s = self.sim, self.setup
        j = energy.energy_j(s.cluster.gpu, sim.busy_by_kind_s, sim.duration_s, sim.replicas,   # type: ignore[union-attr]
                            s.replica_gpus)
        return j / max(self._tokens()[0], 1.0)

    def latency(self, name: str) -> dict[str, float]:
        nan = {"mean": float("nan"), "p50": float("nan"), "p90": float("nan"), "p99": float("nan")}
        if not self.fits:
            return nan
        sim = self.sim
        if name == "itl_s":
            x, w = sim.itl_samples, sim.itl_weights   # type: ignore[union-attr]
            if not len(x):
                return nan
            order = np.argsort(x)
            x, w = x[order], w[order]
            cw = np.cumsum(w) / w.sum()
            pick = lambda q: float(x[min(len(x) - 1, int(np.searchsorted(cw, q)))])   # noqa: E731
            return {"mean": float((x * w).sum() / w.sum()), "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99)}
        x = {"ttft_s": sim.ttft_s, "tpot_s": sim.tpot_s, "e2e_latency_s": sim.e2e_s}[name]   # type: ignore[union-attr]
        if not len(x):
            return nan
        p50, p90, p99 = np.percentile(x, [50, 90, 99])
        return {"mean": float(x.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}

    def to_json(self) -> dict:
        s, mem = self.setup, self.memory
        sim = self.sim
        out = {
            "schema": 1,
            "model": s.model.name, "gpu": s.cluster.gpu.name, "num_gpus": s.num_gpus,
            "plan": {"tp": s.tp, "pp": s.pp, "ep": s.ep, "dp": s.dp, "adp": s.attention_dp}, "engine": s.engine.name,
            "precision": s.precision, "kv_cache_dtype": s.kv_dtype, "workload": self.workload,
            "num_requests": len(sim.requests) if sim else 0,
            "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s / s.num_gpus,
            "total_tokens_per_s": self.total_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "ttft_s": self.latency("ttft_s"), "tpot_s": self.latency("tpot_s"), "itl_s": self.latency("itl_s"),
            "e2e_latency_s": self.latency("e2e_latency_s"),
            "kv_cache_tokens": mem.kv_cache_tokens,
            "max_concurrent_requests": self.max_concurrent_requests,
            "memory_per_gpu_bytes": mem.used_bytes, "memory": mem.to_json(),
            "fits": self.fits,
            "energy_per_output_token_j": self.energy_per_output_token_j,
            "duration_s": sim.duration_s if sim else 0.0,
            "preemptions": sim.preemptions if sim else 0,
            "step_breakdown_s": {"prefill": self.prefill_step.breakdown() if self.prefill_step else {},
                                 "decode": self.decode_step.breakdown() if self.decode_step else {}},
            "assumptions": list(self.assumptions),
        }
        if not mem.fits:
            out["reason"] = mem.reason
        return out

    @property
    def max_concurrent_requests(self) -> int:
        """Sequences the KV cache holds at once at this workload's mean length (capped by max_num_seqs)."""
        r = self.sim.requests if self.sim else None
        mean_len = float((r.input_len + r.output_len).mean()) if r is not None and len(r) else 1.0
        cap = self.setup.engine.max_num_seqs * self.setup.attention_dp
        return int(min(cap, self.memory.kv_cache_tokens // max(1.0, mean_len)))


def read_dataset(path: str | Path) -> Requests:
    """Requests from a CSV or JSONL file with input_len, output_len and optionally arrival_time (s)."""
    p = Path(path)
    if not p.exists():
        raise DataError("dataset_file", f"{p.name} not found", "give a CSV or JSONL with input_len,output_len")
    if not p.is_file():
        raise DataError("dataset_file", f"{str(p)!r} is a directory", "give a CSV or JSONL file with input_len,output_len")
    rows: list[dict] = []
    try:
        if p.suffix.lower() in (".jsonl", ".json"):
            for line in p.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    rows.append(json.loads(line))
        else:
            with p.open(newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
    except (json.JSONDecodeError, csv.Error, UnicodeDecodeError) as e:
        raise DataError("dataset_file", f"{p.name} cannot be read ({e.__class__.__name__})",
                        "write CSV with a header row or one JSON object per line") from None
    if not rows:
        raise DataError("dataset_file", f"{p.name} has no requests", "add rows of input_len,output_len")
    try:
        inp_f = np.array([float(r["input_len"]) for r in rows])
        out_f = np.array([float(r["output_len"]) for r in rows])
        has_t = all(str(r.get("arrival_time", "")).strip() != "" for r in rows)
        arr = np.array([float(r["arrival_time"]) for r in rows]) if has_t else np.zeros(len(rows))
    except (KeyError, ValueError, TypeError, AttributeError):
        raise DataError("dataset_file", f"{p.name} needs numeric input_len and output_len on every row",
                        "columns: arrival_time (optional, s), input_len, output_len") from None
    for col, v in (("input_len", inp_f), ("output_len", out_f)):
        bad = np.flatnonzero(~np.isfinite(v) | (v != np.round(v)))
        if len(bad):     # a fractional or missing length is a broken file, not something to round
            raise DataError(f"dataset_file.{col}", f"row {bad[0] + 1} of {p.name} has {v[bad[0]]:g}, not a whole "
                            "number of tokens", "give token counts as integers")
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
    if len(bad):
        raise DataError("dataset_file.arrival_time", f"row {bad[0] + 1} of {p.name} has {arr[bad[0]]:g}",
                        "give arrival times in seconds, 0 or more, on every row (or leave the column out)")
    inp, out = inp_f.astype(np.int64), out_f.astype(np.int64)
    if (inp < 1).any() or (out < 1).any() or (inp > MAX_TOKENS).any() or (out > MAX_TOKENS).any():
        raise DataError("dataset_file", "lengths must lie in 1 .. 10M tokens", "fix the rows")
    order = np.argsort(arr, kind="stable")
    return Requests(arr[order] - arr.min(), inp[order], out[order])


def _check_len(name: str, v: int | None) -> None:
    if v is not None and not 1 <= v <= MAX_TOKENS:
        raise SpecError(name, f"{v} is not a length in tokens (1 .. {MAX_TOKENS:,})", "give a positive token count")


def build_setup(q: ServeRequest) -> tuple[ServeSetup, list[str]]:
    """The checked deployment of ``q``: model, cluster, plan (dp filled to use every GPU), engine."""
    from ..catalog import load_model
    from ..jobs import resolve_cluster
    notes: list[str] = []
    m = load_model(q.model)
    max_model_len = q.max_model_len
    native = group("serve.max_position_embeddings").get(m.name)
    if max_model_len is None and native and (q.engine or "").strip().lower() == "vllm":
        # vllm serve without --max-model-len takes the model config's max_position_embeddings (the constant's source)
        max_model_len = int(native)
    eng, version_notes = engine_for_version(get_engine(q.engine), q.engine_version, m.mla is not None,
                                            q.engine_backend, max_model_len)
    if max_model_len != q.max_model_len and any("max_model_len" in n for n in version_notes):
        notes.append(f"max_model_len: no --max-model-len given, so vLLM's default, the model config's "
                     f"max_position_embeddings {max_model_len:,} (serve.max_position_embeddings.{m.name})")
    notes += version_notes
    overrides = {"max_num_seqs": q.max_num_seqs, "max_num_batched_tokens": q.max_num_batched_tokens,
                 "scheduler_steps": q.num_scheduler_steps, "chunked_prefill": q.chunked_prefill}
    for k, v in overrides.items():
        if v is not None and not isinstance(v, bool) and v < 1:
            raise SpecError(k, f"{v} must be at least 1", "give a positive limit")
    eng = eng.with_overrides(**overrides)
    if eng.max_num_batched_tokens < eng.max_num_seqs:
        # vLLM refuses the same at start-up (vllm/config/scheduler.py SchedulerConfig._verify_args: "must be
        # greater than or equal to max_num_seqs"): a step could not give every running sequence one token
        raise SpecError("max-num-batched-tokens", f"{eng.max_num_batched_tokens} tokens per step is below "
                        f"max-num-seqs {eng.max_num_seqs}: a decode step could not give each running sequence a token",
                        f"give --max-num-batched-tokens of at least {eng.max_num_seqs}, or lower --max-num-seqs")
    if q.enforce_eager:
        # vLLM --enforce-eager turns off torch.compile too, and SGLang runs its modules eagerly outside graphs:
        # every kernel at eager PyTorch's host cost (a TensorRT engine keeps its C++ enqueue)
        eager = eng.eager_dispatch_s if eng.name == "trtllm" else value("host.torch_forward_per_kernel_s")
        eng = eng.with_overrides(cuda_graph_max_batch=0, eager_dispatch_s=eager)
        notes.append("eager: no CUDA graphs, every kernel launched from the host")
    if not eng.chunked_prefill:
        notes.append("chunked prefill off: a prompt is prefilled whole in one iteration (vLLM "
                     "--enable-chunked-prefill=False)")
    if eng.prefill_stalls_decode:
        notes.append("a step that prefills runs no decode tokens: the running requests wait for it")
    if eng.scheduler_steps > 1:
        notes.append(f"multi-step scheduling: {eng.scheduler_steps} decode iterations per scheduling decision; "
                     "requests arriving meanwhile wait for the run to end (vLLM docs, --num-scheduler-steps)")
    plan = parse_serve_plan(q.plan)
    replica = plan["tp"] * plan["pp"]
    num_gpus = q.num_gpus
    if num_gpus is None and q.cluster is None:
        num_gpus = replica * max(1, plan["dp"])
    cluster = resolve_cluster(q.gpu, num_gpus, q.cluster, q.gpus_per_node)
    eng, platform_notes = engine_for_platform(eng, q.engine_version, cluster.gpu.vendor)
    for note in platform_notes:   # a rule's note where it changes this run's pricing
        if ("fbgemm_fp8" in note and q.precision in CHANNELWISE_FP8) or ("MLA" in note and m.mla is not None):
            notes.append(note)
    n = cluster.num_gpus
    if n % replica:
        raise PlanError("plan", f"tp*pp = {replica} does not divide {n} GPUs", "choose tp, pp dividing --num-gpus")
    dp = plan["dp"] or n // replica
    if replica * dp != n:
        raise PlanError("plan.dp", f"tp*pp*dp = {replica * dp} differs from {n} GPUs",
                        f"use dp={n // replica} or leave dp out")
    if q.precision not in PRECISIONS:
        raise SpecError("precision", f"unknown serving precision {q.precision!r}", f"use one of {', '.join(PRECISIONS)}")
    kv = q.kv_cache_dtype or ""
    if kv and kv not in KV_DTYPES:
        raise SpecError("kv_cache_dtype", f"unknown KV-cache dtype {kv!r}", f"use one of {', '.join(KV_DTYPES)}")
    if not kv:
        notes.append("kv_cache_dtype: the engine default, 16-bit (vLLM, SGLang and TensorRT-LLM keep a bf16 cache "
                     "unless asked for fp8)")
    if q.precision == "int4-awq":
        notes.append("int4-awq: weight bytes shrink to 4 bits (+ group-128 scales); GEMMs priced as 16-bit "
                     "(dequantization cost not modelled)")
    if q.precision == "nvfp4" and "fp4" not in cluster.gpu.peak_flops:
        notes.append(f"nvfp4: {cluster.gpu.name} has no FP4 peak; GEMMs priced at its 16-bit peak")
    if plan["adp"] > 1:
        notes.append(f"attention data-parallel over the {plan['tp']} tp ranks: each rank runs all heads for its own "
                     "sequences and holds their KV cache; batch and token limits are per rank")
    setup = ServeSetup(m, cluster, tp=plan["tp"], pp=plan["pp"], ep=plan["ep"], dp=dp, attention_dp=plan["adp"],
                       precision=q.precision,
                       kv_cache_dtype=kv, engine=eng)
    return setup, notes


def workload_of(q: ServeRequest) -> str:
    if q.concurrency is not None and q.request_rate is not None:
        raise SpecError("concurrency", "given with --request-rate", "give one: a closed loop (--concurrency) or "
                        "an open loop (--request-rate)")
    if q.concurrency is not None and q.concurrency < 1:
        raise SpecError("concurrency", f"{q.concurrency} must be at least 1", "give requests in flight")
    if q.request_rate is not None and not (q.request_rate > 0 and math.isfinite(q.request_rate)):
        raise SpecError("request_rate", f"{q.request_rate} must be a positive rate", "give requests per second")
    w = q.workload
    if w is None:
        w = "concurrency" if q.concurrency else "poisson" if q.request_rate else "trace" if q.dataset_file else "offline"
    if w not in ("offline", "concurrency", "poisson", "static", "trace"):
        raise SpecError("workload", f"unknown workload {w!r}", "use offline, concurrency, poisson, static or trace")
    if w == "concurrency" and not q.concurrency:
        raise SpecError("concurrency", "missing for a closed-loop workload", "give --concurrency")
    if w == "poisson" and not q.request_rate:
        raise SpecError("request_rate", "missing for a Poisson workload", "give --request-rate")
    return w


def requests_of(q: ServeRequest, workload: str, setup: ServeSetup, notes: list[str]) -> Requests:
    n = q.num_requests
    if n is not None and not 1 <= n <= MAX_REQUESTS:
        raise SpecError("num_requests", f"{n} must lie in 1 .. {MAX_REQUESTS:,}", "give a request count")
    if q.dataset_file is not None:
        req = read_dataset(q.dataset_file)
        if n is not None:
            req = Requests(req.arrival_s[:n], req.input_len[:n], req.output_len[:n])
        limit = setup.model.max_seq_len
        longest = int((req.input_len + req.output_len).max())
        if longest > max(limit, 1):
            raise DataError("dataset_file", f"a request of {longest:,} tokens (input + output) exceeds "
                            f"{setup.model.name}'s context of {limit:,}", "drop or shorten those rows, or choose "
                            "a model with a longer context")
        if workload != "trace":
            base = make_requests(len(req), req.input_len, req.output_len, workload=workload,
                                 request_rate=q.request_rate, seed=q.seed)
            req = base
        return req
    _check_len("input_len", q.input_len)
    _check_len("output_len", q.output_len)
    if q.dataset is not None and workload != "trace":
        if n is None:
            n = 1000
            notes.append("num_requests: 1000 (not given)")
        inp_a, out_a = dataset.sample(q.dataset, n, seed=q.seed, output_len=q.output_len)
        notes.append(dataset.describe(q.dataset))
        limit = setup.model.max_seq_len
        if int((inp_a + out_a).max()) > max(limit, 1):
            raise SpecError("dataset", f"{q.dataset} requests exceed the model's context of {limit:,}",
                            "choose a model with a longer context")
        return make_requests(n, inp_a, out_a, workload=workload, request_rate=q.request_rate, seed=q.seed)
    if workload == "trace":
        raise SpecError("dataset_file", "missing for a trace workload", "give --dataset-file")
    inp = q.input_len if q.input_len is not None else 1024
    out = q.output_len if q.output_len is not None else 128
    if q.input_len is None or q.output_len is None:
        notes.append(f"lengths: input {inp} and output {out} tokens where not given")
    limit = setup.model.max_seq_len
    if inp + out > max(limit, 1):
        raise SpecError("input_len", f"input {inp} + output {out} tokens exceed the model's context of {limit:,}",
                        "give shorter requests")
    if n is None:
        n = setup.engine.max_num_seqs if workload == "static" else (max(100, 10 * (q.concurrency or 0)) if
                                                                   workload == "concurrency" else 1000)
        notes.append(f"num_requests: {n} (not given)")
    return make_requests(n, inp, out, workload=workload, request_rate=q.request_rate, seed=q.seed)


def _disagg(text: str | None, dp: int) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise SpecError("disaggregate", f"{text!r} is not P:D", 'write e.g. "1:1" (prefill:decode replicas)') from None
    if a < 1 or b < 1 or a + b != dp:
        raise SpecError("disaggregate", f"{a}:{b} must be two positive counts summing to dp={dp}",
                        "split the replicas between prefill and decode")
    return a, b


def _check_unchunked_budget(q: ServeRequest, setup: ServeSetup, req: Requests) -> None:
    """A token budget given with chunked prefill off must hold the longest request whole.

    vLLM refuses max_num_batched_tokens below max_model_len when chunked prefill is off, at start-up
    (vllm/config/scheduler.py, SchedulerConfig.verify_max_model_len, commit 01230b4: "max_num_batched_tokens
    ... is smaller than max_model_len"): a prompt is prefilled in one step, and a preempted request is
    re-prefilled with the tokens it generated, so the smallest max_model_len that serves these requests is
    the longest input + output. Simulating the run anyway would prefill those prompts whole past the budget.
    Only a budget the user gave is checked: the engine's default is sized to max_model_len without chunking
    (vLLM SchedulerConfig: max(max_model_len, 2048) when chunked prefill is off)."""
    if q.max_num_batched_tokens is None or setup.engine.chunked_prefill:
        return
    i = int(np.argmax(req.input_len + req.output_len))
    inp, out = int(req.input_len[i]), int(req.output_len[i])
    if q.max_num_batched_tokens < inp + out:
        where = "the longest request of --dataset-file" if q.dataset_file is not None else (
            f"the longest {q.dataset} request" if q.dataset is not None else "each request")
        raise SpecError("max-num-batched-tokens", f"{q.max_num_batched_tokens:,} tokens per step is below {where}, "
                        f"{inp:,} + {out:,} tokens: without chunked prefill a prompt (and a preempted request's "
                        "generated tokens) is prefilled in one step (vLLM refuses a budget below max_model_len)",
                        f"give --max-num-batched-tokens of at least {inp + out}, or drop --no-chunked-prefill")


def predict_serving(q: ServeRequest, *, pricer: StepPricer | None = None) -> ServeResult:
    """Simulate ``q`` and return what it measures (see ServeResult.to_json for the keys)."""
    workload = workload_of(q)
    setup, notes = build_setup(q)
    req = requests_of(q, workload, setup, notes)
    if q.harness_batcher is not None and workload in ("poisson", "trace"):
        wait_s, batch = q.harness_batcher
        if not (wait_s >= 0 and math.isfinite(wait_s)) or batch < 1:
            raise SpecError("harness_batcher", f"{q.harness_batcher} is not (wait >= 0 s, batch >= 1)",
                            "give the batcher's wait threshold in seconds and its batch size")
        dispatch, route = harness_batches(req.arrival_s, float(wait_s), int(batch), setup.dp)
        req = Requests(req.arrival_s, req.input_len, req.output_len, dispatch, route)
        notes.append(f"harness batcher: queries held up to {wait_s:g} s or {batch} queries, each batch sent to the "
                     "next replica in turn; TTFT and latency count from the query's issue")
    _check_unchunked_budget(q, setup, req)
    disagg = _disagg(q.disaggregate, setup.dp)
    longest = int((req.input_len + req.output_len).max())
    mem = memory_plan(setup, longest)
    notes.append(f"engine {setup.engine.name}: " + "; ".join(setup.engine.sources))
    notes.append(energy.ASSUMPTION)
    if disagg:
        notes.append(f"disaggregated: {disagg[0]} prefill and {disagg[1]} decode replicas; KV sent over the NICs of "
                     "a replica's GPUs (RDMA, no overlap with prefill)")
    pricer = pricer or StepPricer(setup)
    inp = int(np.median(req.input_len))
    prefill_step = pricer.price(prefill=((min(inp, setup.engine.max_num_batched_tokens), 0),))
    dec_b = max(1, min(setup.engine.max_num_seqs * setup.attention_dp, mem.kv_cache_tokens // max(1, longest)))
    decode_step = pricer.price(decode_seqs=dec_b, decode_context=dec_b * (inp + int(np.median(req.output_len)) // 2))
    if not mem.fits:
        return ServeResult(setup, mem, None, workload, notes, prefill_step, decode_step)
    stream = (q.multi_step_stream or "run").strip().lower()
    if stream not in ("run", "step"):
        raise SpecError("multi_step_stream", f"unknown streaming mode {q.multi_step_stream!r}",
                        "use run (tokens at the end of a multi-step run) or step (a token per step)")
    if stream == "step" and setup.engine.scheduler_steps > 1:
        notes.append("multi-step streaming: each step's token reaches the client as it is sampled (one "
                     "inter-token gap per step, not per run)")
    sim = Simulator(setup, mem.kv_cache_tokens, static=workload == "static", disaggregate=disagg, pricer=pricer,
                    stream_every_step=stream == "step")
    res = sim.run(req, concurrency=q.concurrency if workload == "concurrency" else None)
    return ServeResult(setup, mem, res, workload, notes, prefill_step, decode_step)


__all__ = ["ServeRequest", "ServeResult", "predict_serving", "read_dataset", "build_setup"]
