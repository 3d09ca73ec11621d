"""Request-level discrete-event simulation of a serving deployment: arrivals, routing over dp
replicas, continuous (iteration-level) batching with chunked prefill, a paged KV cache with
preemption when it is full, and optional prefill/decode disaggregation with the KV cache sent over
the network. Deterministic: the only randomness is the arrival process, drawn from ``seed``.

Why not ``sim.engine``: that engine replays a task graph known in advance (streams, dependencies,
shared links); a continuous-batching engine decides each iteration from the state the previous one
left (who arrived, who finished, what fits in the cache), so the graph does not exist before the run.
A small heap of events (arrivals, iteration ends, KV transfers) is all this needs.

Per replica and iteration (vLLM V1's scheduler, which SGLang and TensorRT-LLM resemble): running
decodes take one token each of the iteration's budget (``max_num_batched_tokens``), then running
prefills continue, then waiting requests are admitted while ``max_num_seqs`` and the cache allow;
a prompt longer than what is left of the budget is chunked (or, without chunked prefill, waits for an
iteration with room). The cache is counted in tokens, each running request wasting half a block on
average (paged allocation). When the next iteration's tokens do not fit, the most recently admitted
request is preempted and recomputed later (vLLM's default policy: its prompt and the tokens it has
generated are prefilled again). Decode iterations advance every running sequence one token, so a
request's progress is the iteration count since it entered decode (no per-token work).
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .workload import ServeSetup, StepPricer

WORKLOADS = ("offline", "concurrency", "poisson", "static", "trace")


@dataclass(frozen=True)
class Requests:
    """Requests by id: arrival time (s; for closed loop ignored), prompt and output lengths. A harness between
    the load generator and the engine may hand a request over later (``dispatch_s``) and to a replica of its
    choosing (``replica``); latencies still count from ``arrival_s``."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    dispatch_s: np.ndarray | None = None
    replica: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.input_len)


def make_requests(n: int, input_len: int | np.ndarray, output_len: int | np.ndarray, *,
                  workload: str = "offline", request_rate: float | None = None, seed: int = 0) -> Requests:
    """``n`` requests of the given lengths arriving as ``workload`` says (Poisson: exponential gaps at
    ``request_rate``, the sample scaled so that its mean rate is exactly the nominal one; offline, static,
    concurrency: all at time 0)."""
    rng = np.random.default_rng(seed)
    inp = np.broadcast_to(np.asarray(input_len, dtype=np.int64), (n,)).copy()
    out = np.broadcast_to(np.asarray(output_len, dtype=np.int64), (n,)).copy()
    if workload == "poisson":
        assert request_rate and request_rate > 0
        arr = np.cumsum(rng.exponential(1.0 / request_rate, size=n))
        arr -= arr[0]
        if n > 1:   # the sample at the nominal rate: n requests span (n - 1) / rate, bursts kept
            arr *= (n - 1) / request_rate / arr[-1]
    else:
        arr = np.zeros(n)
    return Requests(arr, inp, out)


def harness_batches(arrival_s: np.ndarray, threshold_s: float, max_batch: int,
                    replicas: int) -> tuple[np.ndarray, np.ndarray]:
    """When and to which replica a harness-side batcher hands each request over: AMD's MLPerf v4.1 llama2-70b
    Server harness (--enable-batcher; closed/AMD/code/llama2-70b-99/VllmFp8/sync_sut.py,
    SyncServerSUT.batch_samples_loop). Its loop, replayed here event by event: it blocks for the first query
    and stamps the time; then, whenever it wakes (a query arrived, or ``threshold_s`` passed without one), it
    sends the held queries (at most ``max_batch``) if there are some and ``max_batch`` are held or
    ``threshold_s`` has passed since the last send; each batch goes to the next engine in turn
    (send_samples -> next_device_id, round-robin). ``arrival_s`` sorted ascending."""
    n = len(arrival_s)
    dispatch = np.empty(n)
    route = np.empty(n, dtype=np.int64)
    if n == 0:
        return dispatch, route
    held: deque[int] = deque([0])
    now = stamp = float(arrival_s[0])
    nxt, device = 1, 0
    while held or nxt < n:
        if held and (len(held) >= max_batch or now - stamp >= threshold_s):
            for _ in range(min(max_batch, len(held))):
                i = held.popleft()
                dispatch[i], route[i] = now, device
            device = (device + 1) % replicas
            stamp = now
            if not held and nxt >= n:
                break
        # queue.get(timeout=threshold): the next query, or a wake-up threshold_s later
        if nxt < n and arrival_s[nxt] <= now + threshold_s:
            now = max(now, float(arrival_s[nxt]))
            held.append(nxt)
            nxt += 1
        elif held:
            now += threshold_s
        else:                    # nothing held: the loop idles until the next query arrives
            now = float(arrival_s[nxt])
            held.append(nxt)
            nxt += 1
    return dispatch, route


@dataclass
class SimResult:
    """What a run measured, per request and per iteration."""

    requests: Requests
    first_token_s: np.ndarray
    finish_s: np.ndarray
    start_s: np.ndarray                 # when each request was issued (closed loop: when a slot freed)
    itl_samples: np.ndarray             # decode iteration durations ...
    itl_weights: np.ndarray             # ... and how many tokens each emitted
    busy_s: float                       # GPU-busy seconds summed over replicas (iterations running)
    replicas: int
    preemptions: int = 0
    max_running: int = 0
    iterations: int = 0
    kv_transfer_s: float = 0.0
    busy_by_kind_s: dict[str, float] = field(default_factory=dict)   # busy_s split: tensor, memory, comm, wait

    @property
    def duration_s(self) -> float:
        return float(self.finish_s.max() - self.start_s.min()) if len(self.finish_s) else 0.0

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.start_s

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.start_s

    @property
    def tpot_s(self) -> np.ndarray:
        out = self.requests.output_len
        mask = out > 1
        return (self.e2e_s[mask] - self.ttft_s[mask]) / (out[mask] - 1)


def _interp_cache(fn, t: int, cache: dict) -> tuple:
    """``fn`` at ``t`` tokens, priced exactly up to 64 and linearly between 16 buckets per octave above."""
    if t <= 64:
        got = cache.get(t)
        if got is None:
            got = cache[t] = fn(t)
        return got
    step = 1 << (t.bit_length() - 5)
    lo = (t // step) * step
    if lo == t:
        got = cache.get(t)
        if got is None:
            got = cache[t] = fn(t)
        return got
    hi = lo + step
    a = cache.get(lo)
    if a is None:
        a = cache[lo] = fn(lo)
    b = cache.get(hi)
    if b is None:
        b = cache[hi] = fn(hi)
    w = (t - lo) / step
    return tuple(x + (y - x) * w for x, y in zip(a, b))


class _Replica:
    __slots__ = ("idx", "role", "waiting", "prefilling", "order", "decoding", "heap", "it", "s0", "n_dec",
                 "kv_tokens", "busy", "capacity", "pre_done", "res", "reserved", "multi", "run_s")

    def __init__(self, idx: int, role: str, capacity: int):
        self.idx, self.role, self.capacity = idx, role, capacity
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []      # rids in prefill (partly done)
        self.pre_done: dict[int, int] = {}   # rid -> prompt tokens prefilled
        self.order: list[int] = []           # running rids in admission order (lazy: finished skipped)
        self.decoding: dict[int, int] = {}   # rid -> iteration it entered decode
        self.heap: list[tuple[int, int]] = []  # (finishing iteration, rid)
        self.it = 0
        self.s0 = 0                          # sum of (prompt - entry iteration + 1) over decoding
        self.n_dec = 0
        self.kv_tokens = 0
        self.res: dict[int, int] = {}        # rid -> tokens reserved at admission
        self.reserved = 0
        self.busy = False
        self.multi = 0                       # decode iterations left of a multi-step run (no admission)
        self.run_s = 0.0                     # time of the multi-step run so far (its tokens stream at its end)

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.prefilling) + self.n_dec


class Simulator:
    """Runs requests through ``setup``'s replicas.

    ``disaggregate``: (prefill replicas, decode replicas) out of setup.dp, or None for colocated.
    ``static``: one batch at a time (of ``max_num_seqs`` requests), no admission while it runs."""

    def __init__(self, setup: ServeSetup, kv_cache_tokens: int, *, static: bool = False,
                 disaggregate: tuple[int, int] | None = None, kv_transfer_bytes_per_s: float | None = None,
                 pricer: StepPricer | None = None, stream_every_step: bool = False):
        self.s = setup
        self.e = setup.engine
        self.pricer = pricer or StepPricer(setup)
        self.capacity = kv_cache_tokens
        self.static = static
        # multi-step scheduling: whether each step's tokens reach the client as they are sampled (one
        # inter-token gap per step) or only when the run ends (one gap per run; the default)
        self.stream_every_step = stream_every_step
        self.disagg = disaggregate
        self.kv_bw = kv_transfer_bytes_per_s or setup.cluster.node.nic_bandwidth_per_gpu * setup.replica_gpus
        self._tok: dict[int, tuple] = {}
        self._head: dict[int, tuple] = {}
        self.waste = (self.e.block_size - 1) / 2.0
        adp = setup.attention_dp       # attention data-parallel: the engine's limits hold per rank
        self.max_seqs = self.e.max_num_seqs * adp
        self.max_tokens = self.e.max_num_batched_tokens * adp
        self.graph_max = self.e.cuda_graph_max_batch * adp
        # a step that prefills runs no decodes (SGLang; vLLM V0 without chunked prefill). Attention data
        # parallelism is left mixed: each rank schedules its own sequences, so only the prefilling rank's
        # decodes wait (assumed negligible against the pooled decodes of the other ranks)
        self.stall = self.e.prefill_stalls_decode and adp == 1
        self._kind_s = [0.0, 0.0, 0.0, 0.0]   # tensor, memory, comm, wait (overhead) seconds of run()

    # ---- one iteration's time ------------------------------------------------------------------
    def step_time(self, prefill: list[tuple[int, int]], n_dec: int, dec_ctx: int) -> float:
        p = self.pricer
        seqs = n_dec + len(prefill)
        tokens = n_dec + sum(q for q, _ in prefill)
        micro = max(1, min(self.s.pp, seqs))
        g, mb, comm = _interp_cache(p.tokens_part, -(-tokens // micro), self._tok)
        hg, hm = _interp_cache(p.head_part, max(1, -(-seqs // micro)), self._head)
        dg, dm = p.decode_attention_per_token
        ag, am = dg * dec_ctx / micro, dm * dec_ctx / micro
        for q, c in prefill:
            pg, pm = p.prefill_attention(q, c)
            ag, am = ag + pg / micro, am + pm / micro
        ag += p.attention_dp_excess(prefill, n_dec) / micro     # the most loaded attention-DP rank
        tensor, memory = g + hg + ag, mb + hm + am
        gpu = tensor + memory + comm
        graph = not prefill and seqs <= self.graph_max
        stalled = 0 if prefill else p.stalled_kernels(p.kernels, -(-tokens // micro), hg > 0)
        over = p.overhead(gpu, graph, None, stalled)
        k = self._kind_s    # busy seconds by power kind (serve/energy.py): the step breakdown's buckets
        k[0] += tensor
        k[1] += memory
        k[2] += comm
        k[3] += over
        return gpu + over

    # ---- the run -------------------------------------------------------------------------------
    def run(self, req: Requests, *, concurrency: int | None = None) -> SimResult:
        n = len(req)
        e = self.e
        inp = req.input_len.astype(np.int64)
        cur_in = inp.copy()              # prompt to prefill (grows on preemption: recompute)
        remaining = req.output_len.astype(np.int64).copy()   # tokens still to emit
        first = np.full(n, np.nan)
        finish = np.full(n, np.nan)
        start = req.arrival_s.astype(float).copy()
        itl_d: list[float] = []
        itl_w: list[int] = []
        stats: dict[str, float] = {"busy": 0.0, "pre": 0, "maxrun": 0, "iters": 0, "xfer": 0.0}
        self._kind_s = [0.0, 0.0, 0.0, 0.0]
        if self.disagg:
            npf, ndc = self.disagg
            reps = [_Replica(i, "prefill", self.capacity) for i in range(npf)] + \
                   [_Replica(npf + i, "decode", self.capacity) for i in range(ndc)]
        else:
            reps = [_Replica(i, "both", self.capacity) for i in range(self.s.dp)]
        entry = [r for r in reps if r.role != "decode"]
        decoders = [r for r in reps if r.role != "prefill"]
        events: list[tuple[float, int, int, int]] = []   # (time, seq, kind, payload)
        seq = 0
        ARRIVE, ITER, XFER, KICK = 0, 1, 2, 3
        next_req = 0
        if concurrency:
            for _ in range(min(concurrency, n)):
                start[next_req] = 0.0
                events.append((0.0, seq, ARRIVE, next_req))
                seq += 1
                next_req += 1
        else:
            handed = start if req.dispatch_s is None else req.dispatch_s   # a harness may hold requests back
            for i in range(n):
                events.append((float(handed[i]), seq, ARRIVE, i))
                seq += 1
            next_req = n
        heapq.heapify(events)
        kvb = self.s.kv_bytes_per_token * self.s.replica_gpus   # every GPU of the replica sends its shard
        pending: dict[int, tuple] = {}   # replica idx -> iteration plan in flight

        def least(group: list[_Replica]) -> _Replica:
            return min(group, key=lambda r: (r.outstanding(), r.idx))

        reserve = e.admission_reserve
        steps = max(1, int(e.scheduler_steps))

        def release(r: _Replica, rid: int) -> None:
            r.reserved -= r.res.pop(rid, 0)

        def plan(r: _Replica, admit: bool) -> tuple | None:
            """The next iteration of ``r``: (prefill chunks [(rid, q, ctx)], admitted rids), or None."""
            # an engine whose prefill steps run no decodes gives a prefill step the whole token budget
            budget = self.max_tokens - (0 if self.stall else r.n_dec)
            chunks: list[tuple[int, int, int]] = []
            running = len(r.prefilling) + r.n_dec
            need = r.n_dec
            for rid in r.prefilling:
                if budget <= 0:
                    break
                done = r.pre_done[rid]
                q = min(int(cur_in[rid]) - done, budget)
                if not e.chunked_prefill and q < int(cur_in[rid]) - done:
                    break
                chunks.append((rid, q, done))
                budget -= q
                need += q
            admitted: list[int] = []
            batch_start = self.static and running == 0     # a static batch forms at once, then runs alone
            if admit and not (self.static and running):
                while r.waiting and (budget > 0 or batch_start) and running < self.max_seqs:
                    rid = r.waiting[0]
                    prompt = int(cur_in[rid])
                    if r.role == "decode":      # KV arrives by transfer: no prefill, just room for it
                        q = 0
                        room = prompt + 1
                    else:
                        q = min(prompt, budget)
                        if not e.chunked_prefill and q < prompt:
                            if chunks or r.n_dec:
                                break
                            # alone, a prompt longer than the budget is prefilled whole: without chunked
                            # prefill vLLM sizes the budget to the longest sequence (max_num_batched_tokens
                            # defaults to max(max_model_len, 2048), vLLM V0 SchedulerConfig; recalled)
                            q = prompt
                        room = q
                    if r.kv_tokens + need + room + (running + 1) * self.waste > r.capacity:
                        break
                    res = prompt + math.ceil(reserve * int(remaining[rid]))
                    if reserve and r.reserved + res + (running + 1) * self.waste > r.capacity:
                        break
                    r.res[rid] = res
                    r.reserved += res
                    r.waiting.popleft()
                    admitted.append(rid)
                    running += 1
                    need += room
                    if q:
                        chunks.append((rid, q, 0))
                        budget -= q
            if not chunks and not r.n_dec and not admitted:
                return None
            return chunks, admitted

        def preempt_for(r: _Replica, extra: int) -> int:
            """Preempt the newest running requests until ``extra`` more tokens fit; how many were."""
            count = 0
            while r.kv_tokens + extra + (len(r.prefilling) + r.n_dec) * self.waste > r.capacity and r.order:
                rid = r.order.pop()
                if rid in r.decoding:
                    i0 = r.decoding.pop(rid)
                    j = r.it - i0 + 1                # decode iterations done
                    r.n_dec -= 1
                    r.s0 -= int(cur_in[rid]) - i0 + 1
                    held = int(cur_in[rid]) + j
                    cur_in[rid] = int(cur_in[rid]) + j + 1   # prompt and generated tokens, recomputed
                    remaining[rid] -= j
                    extra -= 1
                elif rid in r.pre_done:
                    held = r.pre_done.pop(rid)
                    r.prefilling.remove(rid)
                else:
                    continue
                r.kv_tokens -= held
                release(r, rid)
                r.waiting.appendleft(rid)
                stats["pre"] += 1
                count += 1
            return count

        def start_iter(r: _Replica, now: float) -> None:
            nonlocal seq
            # an iteration that had to preempt admits nobody (vLLM V1's scheduler does the same)
            preempted = preempt_for(r, r.n_dec) if r.role != "prefill" else 0
            # multi-step scheduling (vLLM --num-scheduler-steps k): a decode-only iteration that admitted
            # nobody commits the next k-1 iterations to the same batch; arrivals wait for the run to end
            in_run = r.multi > 0 and r.n_dec > 0 and not r.prefilling
            p = plan(r, admit=not preempted and not in_run)
            if p is None:
                r.busy = False
                r.multi = 0
                return
            chunks, admitted = p
            run = 0                  # 0: a single step, 1: a multi-step run goes on after it, 2: its last step
            if in_run:
                r.multi -= 1
                run = 1 if r.multi else 2
            elif steps > 1 and not chunks and not admitted:
                r.multi = steps - 1
                r.run_s = 0.0
                run = 1
            else:
                r.multi = 0
            for rid in admitted:
                r.order.append(rid)
                if r.role == "decode":
                    r.kv_tokens += int(cur_in[rid])
                    self._enter_decode(r, rid, cur_in, remaining)
                else:
                    r.prefilling.append(rid)
                    r.pre_done[rid] = 0
            n_dec = 0 if (self.stall and chunks) else r.n_dec
            dec_ctx = r.s0 + n_dec * (r.it + 1) if n_dec else 0   # each decode reads its prompt + tokens so far
            dur = self.step_time([(q, c) for _, q, c in chunks], n_dec, dec_ctx)
            stats["busy"] += dur
            stats["iters"] += 1
            stats["maxrun"] = max(stats["maxrun"], len(r.prefilling) + r.n_dec)
            r.busy = True
            pending[r.idx] = (chunks, dur, run, n_dec > 0)
            heapq.heappush(events, (now + dur, seq, ITER, r.idx))
            seq += 1

        def finish_req(rid: int, t: float) -> None:
            nonlocal next_req, seq
            finish[rid] = t
            if concurrency and next_req < n:
                start[next_req] = t
                heapq.heappush(events, (t, seq, ARRIVE, next_req))
                seq += 1
                next_req += 1

        while events:
            t, _, kind, x = heapq.heappop(events)
            if kind == ARRIVE or kind == XFER:
                if kind == ARRIVE and req.replica is not None:   # the harness chose the replica
                    r = entry[int(req.replica[x]) % len(entry)]
                else:
                    r = least(entry if kind == ARRIVE else decoders)
                r.waiting.append(x)
                if not r.busy:   # start after every event at this instant (simultaneous arrivals batch)
                    r.busy = True
                    heapq.heappush(events, (t, seq, KICK, r.idx))
                    seq += 1
                continue
            if kind == KICK:
                start_iter(reps[x], t)
                continue
            r = reps[x]
            chunks, dur, run, decoded = pending.pop(r.idx)
            # decode tokens of this iteration
            if decoded and r.n_dec:
                r.it += 1
                r.kv_tokens += r.n_dec
                if run == 1 and not self.stream_every_step:   # tokens stream when the run ends: one gap per run
                    r.run_s += dur
                else:
                    itl_d.append(dur + (r.run_s if run == 2 and not self.stream_every_step else 0.0))
                    itl_w.append(r.n_dec)
                    r.run_s = 0.0
                while r.heap and r.heap[0][0] <= r.it:
                    _, rid = heapq.heappop(r.heap)
                    i0 = r.decoding.pop(rid, None)
                    if i0 is None or i0 + int(remaining[rid]) - 1 != r.it:
                        if i0 is not None:
                            r.decoding[rid] = i0
                        continue
                    r.n_dec -= 1
                    r.s0 -= int(cur_in[rid]) - i0 + 1
                    r.kv_tokens -= int(cur_in[rid]) + int(remaining[rid])
                    release(r, rid)
                    finish_req(rid, t)
            # prefill chunks of this iteration
            for rid, q, _c in chunks:
                r.pre_done[rid] += q
                r.kv_tokens += q
                if r.pre_done[rid] < int(cur_in[rid]):
                    continue
                r.prefilling.remove(rid)
                del r.pre_done[rid]
                if np.isnan(first[rid]):
                    first[rid] = t
                remaining[rid] -= 1              # the prefill samples one token
                if remaining[rid] <= 0:
                    r.kv_tokens -= int(cur_in[rid])
                    release(r, rid)
                    finish_req(rid, t)
                    continue
                if r.role == "prefill":
                    r.kv_tokens -= int(cur_in[rid])
                    release(r, rid)
                    xfer = int(cur_in[rid]) * kvb / self.kv_bw
                    stats["xfer"] += xfer
                    heapq.heappush(events, (t + xfer, seq, XFER, rid))
                    seq += 1
                    continue
                self._enter_decode(r, rid, cur_in, remaining)
            if len(r.order) > 2 * (len(r.prefilling) + r.n_dec) + 64:   # drop finished ones now and then
                r.order = [o for o in r.order if o in r.decoding or o in r.pre_done]
            start_iter(r, t)
        done = ~np.isnan(finish)
        if not done.all():   # cannot happen unless a request never fits: report them as unfinished
            finish[~done] = np.inf
            first[np.isnan(first)] = np.inf
        return SimResult(req, first, finish, start, np.asarray(itl_d), np.asarray(itl_w, dtype=float),
                         stats["busy"], len(reps), int(stats["pre"]), int(stats["maxrun"]), int(stats["iters"]),
                         stats["xfer"], dict(zip(("tensor", "memory", "comm", "wait"), self._kind_s)))

    def _enter_decode(self, r: _Replica, rid: int, cur_in: np.ndarray, remaining: np.ndarray) -> None:
        """``rid`` (its prompt in the cache, ``remaining`` tokens still to emit) decodes from the next
        iteration on: after k iterations it holds prompt + k tokens and is done at k = remaining."""
        i0 = r.it + 1
        r.decoding[rid] = i0
        r.n_dec += 1
        # the k-th decode iteration (global r.it = i0 + k - 1) reads prompt + k tokens
        r.s0 += int(cur_in[rid]) - i0 + 1
        heapq.heappush(r.heap, (i0 + int(remaining[rid]) - 1, rid))


__all__ = ["Requests", "make_requests", "harness_batches", "Simulator", "SimResult", "WORKLOADS"]
