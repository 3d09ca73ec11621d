"""Monte Carlo replay of a training run under the goodput model, to check the analytic figure and to
give its spread.

Each run draws failures from the model (exponential gaps at the job's unplanned rate, planned
interruptions at the planned rate, a restart time per failure from the restart distribution) and
plays the run event by event: restart (a failure during it starts it again), segments of ``k`` steps
each followed by a checkpoint stall, a checkpoint durable ``P`` after its stall, a failure rolling the
job back to the last durable checkpoint, a planned interruption checkpointing first. All runs advance
together, one event per run per iteration (numpy), so thousands of runs with hundreds of failures
each take well under a second.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import SpecError

MAX_EVENTS = 5_000_000    # runs x expected events: above it the simulation is refused as too long
MAX_MISSING = 16          # nodes a degraded run can miss at once (more: their time-equivalent is charged)


def simulate(params, runs: int = 1000, seed: int = 0, ideal_s: float | None = None, held_gpus: int = 0,
             gpu_hour_price: float | None = None):
    """Simulate ``runs`` independent runs of ``params`` (a goodput.RunParams); returns a MonteCarloSummary.

    With ``params.spares`` > 0 the spare pool is explicit: a failure that needs its node replaced takes a
    free spare (the spare branch) if one is back from repair, and sends the failed node to repair for
    ``params.repair_s`` (a repair event); with none free it takes the no-spare branch. Fail-slow events
    (``params.slow_rate_per_s``) cost ``params.slow_cost_s`` each, work kept. ``held_gpus`` (the job's and
    the spares' GPUs) turns each run's time into GPU-hours, and with ``gpu_hour_price`` into USD."""
    from .goodput import AnalyticResult, MonteCarloSummary, expected_time
    if isinstance(runs, bool) or not isinstance(runs, (int, np.integer)) or runs < 1:
        raise SpecError("monte_carlo", f"{runs!r} runs: need a positive whole number", "e.g. --monte-carlo 1000")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SpecError("seed", f"{seed!r} must be a non-negative whole number", "e.g. --seed 0")
    ana = expected_time(params)
    assert isinstance(ana, AnalyticResult)
    events = (ana.failures + ana.planned + ana.slow_events + 1.0) * runs
    if not math.isfinite(ana.total_s) or events > MAX_EVENTS:
        raise SpecError("monte_carlo", f"about {events:.3g} simulated events ({ana.failures:.3g} failures per run) "
                        "is too many to simulate", "use fewer runs, or check the failure rate against the restart time")
    rng = np.random.default_rng(int(seed))
    n = int(runs)
    W, tau, C, P = params.work_s, params.tau_s, params.blocking_s, params.persist_s
    B = tau + C
    lam, mu = params.rate_per_s + params.slow_rate_per_s, params.planned_rate_per_s
    slow_share = params.slow_rate_per_s / lam if lam > 0 else 0.0
    degraded = params.degraded_loss > 0
    explicit = (params.spares > 0 or degraded) and params.replace_share > 0
    in_place, spare_b, no_spare = params.branches_s
    pool = np.full((runs, max(1, int(params.spares))), -np.inf if params.spares > 0 else np.inf)  # spare back at
    missing = np.full((runs, MAX_MISSING), np.inf)      # when each missing node returns (degraded policies)
    misses = np.zeros(runs)
    values = np.asarray(params.restart_values_s, dtype=float)
    probs = np.asarray(params.restart_probs, dtype=float)
    probs = probs / probs.sum()

    def draw_restart(idx: np.ndarray, at: np.ndarray) -> np.ndarray:
        size = len(idx)
        if explicit:
            rep = rng.random(size) < params.replace_share
            out = np.full(size, in_place)
            if rep.any():
                r = idx[rep]
                when = at[rep]
                free = pool[r] <= when[:, None]
                has = free.any(axis=1)
                slot = np.argmax(free, axis=1)
                pool[r[has], slot[has]] = when[has] + params.repair_s
                vals = np.where(has, spare_b, no_spare)
                misses[r[~has]] += 1
                if degraded and (~has).any():     # keep going without the node until it is replaced
                    q, w = r[~has], when[~has]
                    room = np.isinf(missing[q])
                    ok = room.any(axis=1)
                    col = np.argmax(room, axis=1)
                    missing[q[ok], col[ok]] = w[ok] + params.return_delay_s
                    sub = np.where(ok, params.degraded_base_s, no_spare)   # no room: the time-equivalent
                    vals[~has] = sub
                out[rep] = vals
            return out
        if len(values) == 1:
            return np.full(size, values[0])
        return rng.choice(values, size=size, p=probs)

    work = np.zeros(n)
    t = np.zeros(n)
    rphase = np.zeros(n)           # restart still to do before computing (0 at the start of the run)
    ckpt = np.zeros(n)
    restart = np.zeros(n)
    fails = np.zeros(n)
    planned = np.zeros(n)
    slow_t = np.zeros(n)
    active = np.ones(n, dtype=bool)
    while active.any():
        i = np.flatnonzero(active)
        m = len(i)
        rem = W - work[i]
        k_full = np.maximum(np.ceil(rem / tau - 1e-12) - 1.0, 0.0)      # checkpoints before the last segment
        if degraded:               # throughput while nodes are missing: the wall time of a segment stretches
            k_miss = np.isfinite(missing[i]).sum(axis=1)
            F = np.clip(1.0 - k_miss * params.degraded_loss, 0.01, 1.0)
            ret = missing[i].min(axis=1)
        else:
            F = np.ones(m)
            ret = np.full(m, np.inf)
        tau_w = tau / F
        Bw = tau_w + C
        finish = k_full * Bw + (rem - k_full * tau) / F
        xu = rng.exponential(1.0 / lam, m) if lam > 0 else np.full(m, np.inf)
        xp = rng.exponential(1.0 / mu, m) if mu > 0 else np.full(m, np.inf)
        R = rphase[i]
        # 1. a failure during the restart: the restart starts over
        during = xu < R
        sd = np.zeros(m, dtype=bool)
        if slow_share > 0 and during.any():      # a fail-slow event during a restart: paid, the restart goes on
            sd = during & (rng.random(m) < slow_share)
            if sd.any():
                j = i[sd]
                t[j] += xu[sd] + params.slow_cost_s
                restart[j] += xu[sd]
                slow_t[j] += params.slow_cost_s
                rphase[j] -= xu[sd]
                during = during & ~sd
        if during.any():
            j = i[during]
            t[j] += xu[during]
            restart[j] += xu[during]
            fails[j] += 1
            rphase[j] = draw_restart(j, t[j])
        ok = ~during & ~sd
        if not ok.any():
            continue
        j = i[ok]
        Rj, yu, yp, fin, kf = R[ok], xu[ok] - R[ok], xp[ok], finish[ok], k_full[ok]
        Fj, Bj, twj = F[ok], Bw[ok], tau_w[ok]
        yr = np.maximum(ret[ok] - (t[j] + Rj), 0.0)    # a missing node back (counted from the resume)
        restart[j] += Rj
        # 2. the run finishes before the next event
        done = (fin <= yu) & (fin <= yp) & (fin <= yr)
        if done.any():
            d = j[done]
            t[d] += Rj[done] + fin[done]
            ckpt[d] += kf[done] * C
            active[d] = False
        # 3. a planned interruption first: checkpoint what is done (unless migrated), wait for it, restart
        pl = ~done & (yp < yu) & (yp <= yr)
        if pl.any():
            q = j[pl]
            y = yp[pl]
            segs = np.floor(y / Bj[pl])
            work[q] += segs * tau + np.minimum(y - segs * Bj[pl], twj[pl]) * Fj[pl]
            if params.planned_cost_s is None:
                ckpt[q] += segs * C + (C + P)
                restart[q] += params.planned_restart_s
                t[q] += Rj[pl] + y + C + P + params.planned_restart_s
            else:
                ckpt[q] += segs * C
                restart[q] += params.planned_cost_s
                t[q] += Rj[pl] + y + params.planned_cost_s
            planned[q] += 1
            rphase[q] = 0.0
        # 4. a missing node comes back: it rejoins (a pause), the work done is kept
        rt = ~done & ~pl & (yr <= yu)
        if rt.any():
            q = j[rt]
            y = yr[rt]
            segs = np.floor(y / Bj[rt])
            work[q] += segs * tau + np.minimum(y - segs * Bj[rt], twj[rt]) * Fj[rt]
            ckpt[q] += segs * C
            restart[q] += params.rejoin_s
            t[q] += Rj[rt] + y + params.rejoin_s
            col = np.argmin(missing[q], axis=1)
            missing[q, col] = np.inf
            rphase[q] = 0.0
        # 5. a fail-slow event (a share of the combined stream): the job slows, is drained, work kept
        rest = ~done & ~pl & ~rt
        is_slow = np.zeros(len(j), dtype=bool)
        if slow_share > 0 and rest.any():
            is_slow[rest] = rng.random(int(rest.sum())) < slow_share
        if is_slow.any():
            q = j[is_slow]
            y = yu[is_slow]
            segs = np.floor(y / Bj[is_slow])
            work[q] += segs * tau + np.minimum(y - segs * Bj[is_slow], twj[is_slow]) * Fj[is_slow]
            ckpt[q] += segs * C
            slow_t[q] += params.slow_cost_s
            t[q] += Rj[is_slow] + y + params.slow_cost_s
            rphase[q] = 0.0
        # 6. an unplanned failure: keep the durable checkpoints, restart
        fl = rest & ~is_slow
        if fl.any():
            q = j[fl]
            y = yu[fl]
            commits = np.clip(np.floor((y - P) / Bj[fl]), 0.0, kf[fl])
            work[q] += commits * tau
            ckpt[q] += commits * C
            t[q] += Rj[fl] + y
            fails[q] += 1
            rphase[q] = draw_restart(q, t[q])
    ideal = W if ideal_s is None else float(ideal_s)
    rework = t - W - ckpt - restart - slow_t      # with degraded running: the slower work is in rework
    mean = float(t.mean())
    std = float(t.std(ddof=1)) if n > 1 else 0.0
    half = 1.96 * std / math.sqrt(n)
    lost = {"checkpointing": float(ckpt.mean()), "rework": float(rework.mean()), "restart": float(restart.mean()),
            "stragglers": float(W - ideal)}
    if params.slow_rate_per_s > 0:
        lost["fail_slow"] = float(slow_t.mean())
    p10, p50, p90 = (float(x) for x in np.percentile(t, [10, 50, 90]))
    gp = ideal / t
    hours = held_gpus * np.array([p10, p50, p90]) / 3600.0
    price = None if gpu_hour_price is None else [float(h * gpu_hour_price) for h in hours]
    return MonteCarloSummary(runs=n, seed=int(seed), mean_s=mean, std_s=std, ci95_s=(mean - half, mean + half),
                             p5_s=float(np.percentile(t, 5)), p50_s=p50,
                             p95_s=float(np.percentile(t, 95)), mean_failures=float(fails.mean()), lost_s=lost,
                             p10_s=p10, p90_s=p90, goodput_p10=ideal / p90, goodput_p50=ideal / p50,
                             goodput_p90=ideal / p10, mean_goodput=float(gp.mean()),
                             gpu_hours_p10=float(hours[0]), gpu_hours_p50=float(hours[1]), gpu_hours_p90=float(hours[2]),
                             cost_usd_p10=None if price is None else price[0],
                             cost_usd_p50=None if price is None else price[1],
                             cost_usd_p90=None if price is None else price[2], spare_misses=float(misses.mean()))
