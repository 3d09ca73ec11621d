"""clustertwin sim: the discrete-event replay of the workload graph.

The engine (streams, dependencies, group collectives, shared links), Megatron's pipeline orders, the
overlap semantics of the block programs (against hand-computed times on a controlled pricer), the
agreement with the analytic model on every configuration of data/validation/public_runs.csv, and what
only the replay shows: a slow GPU propagating through the pipeline and the DP synchronisation.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from clustertwin.cli import main
from clustertwin.parallel import GroupPlacement
from clustertwin.errors import ClusterTwinError, PlanError
from clustertwin.predict import make_training_job, predict_job
from clustertwin.schedule.step import runs_dualpipe
from clustertwin.sim.engine import Engine
from clustertwin.sim.program import build_program
from clustertwin.sim.replay import replay_program, simulate
from clustertwin.sim.schedule import next_virtual, stage_order
from clustertwin.validate.runs import job_from_row, read_runs
from clustertwin.workload.graph import build_graph
from clustertwin.workload.ops import OpKind, Phase

VALIDATION = Path(__file__).resolve().parents[1] / "data" / "validation" / "public_runs.csv"
MOE_RUNS = Path(__file__).resolve().parents[1] / "data" / "validation" / "moe_public_runs.csv"

# Configurations of data/validation/public_runs.csv where the replay and the analytic model are known to differ by
# more than 5%, and why (the replay is the faithful one; see docs/trace.md "sim vs predict").
_NEMOTRON_GAP = (
    "Nemotron-4 340B with vpp=12 (one layer per virtual chunk) and a 256K vocabulary: the LM head makes "
    "one chunk of the last stage ~3x heavier than the others, which the replay runs as such while the "
    "analytic model averages the stage; the replay also releases DP buckets at chunk granularity. "
    "The replay is 6-7% slower")
KNOWN_GAPS = {
    "dgxc-h100-nemotron4-340b-fp8-128gpu": _NEMOTRON_GAP,
    "dgxc-h100-nemotron4-340b-fp8-2048gpu": _NEMOTRON_GAP,
}


# ---- engine ---------------------------------------------------------------------------------------
def test_stream_runs_tasks_in_order_and_dependencies_hold():
    e = Engine()
    s = e.stream("r", "compute")
    a = e.add((s,), 1.0)
    b = e.add((s,), 2.0)
    c = e.add((e.stream("r", "tp"),), 0.5, deps=(a,))
    d = e.add((s,), 1.0, deps=(c,))
    assert e.run() == 4.0
    assert (e.start[b], e.end[b]) == (1.0, 3.0)
    assert (e.start[c], e.end[c]) == (1.0, 1.5)
    assert e.start[d] == 3.0


def test_collective_waits_for_its_whole_group():
    e = Engine()
    fast = e.add((e.stream(0, "compute"),), 1.0)
    slow = e.add((e.stream(1, "compute"),), 5.0)
    coll = e.add((e.stream(0, "tp"), e.stream(1, "tp")), 2.0, deps=(fast, slow))
    after = e.add((e.stream(0, "compute"),), 1.0, deps=(coll,))
    assert e.run() == 8.0
    assert e.start[coll] == 5.0 and e.start[after] == 7.0


def test_transfers_share_a_link_and_latency_is_not_shared():
    e = Engine()
    nic = e.link("r0", "nic", "tx")
    a = e.add((e.stream(0, "dp"),), 2.0, latency=0.5, links=(nic,))
    b = e.add((e.stream(0, "pp"),), 1.0, latency=0.5, links=(nic,))
    alone = e.add((e.stream(1, "pp"),), 1.0, latency=0.5, links=(e.link("r1", "nic", "tx"),))
    e.run()
    # both move bytes from t=0.5 at half rate: b's 1 s of work ends at 2.5; a then runs alone: 3.5
    assert e.end[b] == pytest.approx(2.5)
    assert e.end[a] == pytest.approx(3.5)
    assert e.end[alone] == pytest.approx(1.5)


def test_a_dependency_cycle_is_reported():
    e = Engine()
    a = e.add((e.stream(0, "c"),), 1.0)
    b = e.add((e.stream(1, "c"),), 1.0, deps=(a,))
    e.depend(a, b)
    with pytest.raises(RuntimeError, match="never became ready"):
        e.run()


# ---- pipeline schedules ---------------------------------------------------------------------------
def test_1f1b_orders_as_megatron():
    assert [f"{ph}{k}" for ph, _, k in stage_order(4, 1, 6, 0)] == \
        ["F0", "F1", "F2", "F3", "B0", "F4", "B1", "F5", "B2", "B3", "B4", "B5"]
    assert [f"{ph}{k}" for ph, _, k in stage_order(4, 1, 6, 3)] == \
        ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3", "F4", "B4", "F5", "B5"]
    assert [f"{ph}{k}" for ph, _, k in stage_order(1, 1, 2, 0)] == ["F0", "B0", "F1", "B1"]


@pytest.mark.parametrize("p,v,m", [(2, 1, 1), (4, 1, 3), (4, 1, 16), (2, 2, 4), (4, 2, 8), (4, 3, 4), (8, 12, 16),
                                   (3, 5, 6)])
def test_every_pass_runs_once_and_backward_follows_forward(p, v, m):
    for stage in range(p):
        order = stage_order(p, v, m, stage)
        assert sorted(order) == sorted((ph, c, k) for ph in "FB" for c in range(v) for k in range(m))
        pos = {x: n for n, x in enumerate(order)}
        assert all(pos[("F", c, k)] < pos[("B", c, k)] for c in range(v) for k in range(m))
        if v > 1:  # Megatron: (p - stage - 1) * 2 + (v - 1) * p warm-up forwards, then each steady step is F, B
            warm = min((p - stage - 1) * 2 + (v - 1) * p, m * v)
            first_b = next(n for n, x in enumerate(order) if x[0] == "B")
            assert first_b == min(warm + 1, m * v)


def test_virtual_stages_chain_through_the_chunks():
    assert next_virtual(3, 0, 4, 2, True) == (0, 1)       # last stage's chunk 0 feeds stage 0's chunk 1
    assert next_virtual(3, 1, 4, 2, True) is None
    assert next_virtual(0, 1, 4, 2, False) == (3, 0)
    assert next_virtual(0, 0, 4, 2, False) is None


# ---- block programs: overlap semantics on a controlled pricer -------------------------------------
class _Network:
    def latency(self, pl, kind):
        return 0.0


class _Pricer:
    """Round numbers: GEMM 10, attention 20, other compute 1, TP collective 4, CP ring ``ring``."""

    def __init__(self, ring: float = 30.0, tp: int = 2, cp: int = 2):
        self.ring = ring
        self.groups = {"tp": GroupPlacement(tp, tp, 1, 1), "cp": GroupPlacement(cp, cp, 1, 1)}
        self.network = _Network()

    def time(self, op):
        if op.is_comm:
            return self.ring if op.group == "cp" else 4.0
        return {OpKind.GEMM: 10.0, OpKind.ATTENTION: 20.0}.get(op.kind, 1.0)


from test_trace import tiny_job as _tiny_job  # noqa: E402  (the same tiny job as the trace golden files)
from clustertwin.schedule.step import OVERLAP_SLOWDOWN  # noqa: E402


def _layer(graph, phase):
    b = next(b for b in graph.stages[0].blocks if b.name == "layer")
    return b.fwd if phase == "F" else b.recompute + b.bwd


def test_tp_overlap_exposes_one_chunk_per_collective_and_cp_ring_only_beyond_attention():
    graph = build_graph(_tiny_job())
    pr = _Pricer(ring=30.0)
    for phase in "FB":
        ops = _layer(graph, phase)
        prog = build_program(ops, pr, tp=2, overlap_tp=True)
        mp = replay_program(prog, (1.0,), pr)
        compute = sum(pr.time(o) for o in ops if not o.is_comm)
        blocking_tp = [o for o in ops if o.is_comm and o.group == "tp" and not o.overlappable]
        ring = sum(pr.time(o) for o in ops if o.group == "cp")
        attn = sum(pr.time(o) for o in ops if o.kind == OpKind.ATTENTION)
        # each TP collective (4) beside a GEMM (10) exposes 1/tp of itself; the re-gather for wgrad hides
        # under the dgrad GEMM; the ring exchange shows only where it outlasts the attention kernel, and
        # slows the attention it hides behind by OVERLAP_SLOWDOWN per second hidden
        assert mp.duration_s == pytest.approx(compute + 4.0 / 2 * len(blocking_tp) + max(0.0, ring - attn)
                                              + OVERLAP_SLOWDOWN * min(ring, attn))


def test_without_tp_overlap_collectives_block_and_a_short_ring_hides():
    graph = build_graph(_tiny_job(plan="tp=2,cp=2,pp=2,dp=2,sp=1,overlap_tp_comm=0"))
    pr = _Pricer(ring=5.0)
    ops = _layer(graph, "F")
    mp = replay_program(build_program(ops, pr, tp=2, overlap_tp=False), (1.0,), pr)
    compute = sum(pr.time(o) for o in ops if not o.is_comm)
    tp = sum(pr.time(o) for o in ops if o.is_comm and o.group == "tp")
    ring = sum(pr.time(o) for o in ops if o.group == "cp")     # hidden, slowing the attention beside it
    assert mp.duration_s == pytest.approx(compute + tp + OVERLAP_SLOWDOWN * ring)


def test_a_slow_member_holds_its_group_back_at_every_collective():
    graph = build_graph(_tiny_job())
    pr = _Pricer(ring=5.0)
    prog = build_program(_layer(graph, "F"), pr, tp=2, overlap_tp=False)
    even = replay_program(prog, (1.0, 1.0), pr)
    slow = replay_program(prog, (1.5, 1.0), pr)
    assert even.duration_s == pytest.approx(replay_program(prog, (1.0,), pr).duration_s)
    assert slow.duration_s > even.duration_s
    # the healthy member computes as fast as before but waits: its busy time is unchanged
    assert slow.busy_s[1] == pytest.approx(even.busy_s[1]) and slow.busy_s[0] == pytest.approx(1.5 * even.busy_s[0])


# ---- the replay against the analytic model --------------------------------------------------------
def _validation_rows():
    rows = [r for r in read_runs(VALIDATION) if r.metric == "iteration_time_s"]
    assert len(rows) >= 40
    return rows


@pytest.fixture(scope="module")
def validation_results():
    out = []
    for row in _validation_rows():
        job = job_from_row(row)
        out.append((row.run_id, predict_job(job).mean_gpu_step_time_s, simulate(job).step_time_s))
    return out


def test_sim_agrees_with_predict_on_the_validation_configurations(validation_results):
    off = []
    for run_id, predicted, simulated in validation_results:
        err = simulated / predicted - 1
        limit = 0.08 if run_id in KNOWN_GAPS else 0.05
        if abs(err) > limit:
            off.append(f"{run_id}: sim {simulated:.3f} s vs predict {predicted:.3f} s ({100 * err:+.1f}%)")
    assert not off, "\n".join(off)


def test_sim_agrees_with_predict_on_the_published_moe_runs():
    """Expert parallelism (all-to-alls), expert data parallelism (a second bucket group) and CP/EP
    layouts. Known gap: under FSDP (ZeRO-3) the replay overlaps each layer's gather with the previous
    layer's compute, so a MoE layer whose expert weights take longer to gather than its neighbour
    takes to compute stays exposed; the analytic model only balances the stage's totals and is
    10-30% faster on the AutoModel DeepSeek-V3 / Kimi K2 rows. Those plans are reported, not compared.
    DualPipe (the DeepSeek-V3 paper row): the replay is slower (14%, bound 20%), for the reasons in
    tests/test_sim_dualpipe.py."""
    if not MOE_RUNS.exists():
        pytest.skip("MoE validation data not present")
    seen, off = set(), []
    for row in read_runs(MOE_RUNS):
        try:
            job = job_from_row(row)
        except ClusterTwinError:
            continue
        key = job.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        try:
            simulated = simulate(job).step_time_s
        except PlanError:      # EP all-to-all overlap (Megatron-Core's combined 1F1B): not replayed
            continue
        predicted = predict_job(job).mean_gpu_step_time_s
        g = build_graph(job)
        if runs_dualpipe(g.plan.pp_schedule, g.framework, g.plan.pp, g.plan.vpp):
            assert predicted <= simulated <= 1.2 * predicted
            continue
        if job.plan.zero_stage == 3 and job.model.is_moe:
            assert simulated >= predicted * 0.99  # the replay only adds the per-layer exposure
            continue
        if abs(simulated / predicted - 1) > 0.05:
            off.append(f"{row.run_id}: sim {simulated:.3f} s vs predict {predicted:.3f} s")
    assert len(seen) >= 5 and not off, "\n".join(off)


def test_known_gaps_are_where_the_replay_sees_the_uneven_chunk(validation_results):
    by_id = {r: (p, s) for r, p, s in validation_results}
    for run_id in KNOWN_GAPS:
        predicted, simulated = by_id[run_id]
        assert predicted < simulated < predicted * 1.08   # the heavy head chunk only adds time


def test_one_rank_per_stage_stands_for_the_whole_job():
    job = make_training_job("llama3-70b", gpu="h100", num_gpus=64, plan="tp=4,pp=4,dp=4,sp=1", micro_batch=1,
                            global_batch=32, seq_len=4096)
    r = simulate(job)
    assert len(r.ranks) == 4 and sum(x.represents for x in r.ranks) == 64
    assert [x.stage for x in r.ranks] == [0, 1, 2, 3]
    # every stage runs all its passes: m forwards and m backwards per chunk
    for x in r.ranks:
        passes = {(t.phase, t.chunk, t.microbatch) for t in x.tasks if t.stream == "compute" and t.phase in ("F", "B")}
        assert len(passes) == 2 * r.num_microbatches
    # the pipeline fills: stage i starts after stage i-1
    starts = [x.first_compute_start_s for x in r.ranks]
    assert starts == sorted(starts) and starts[-1] > starts[0]


def test_dp_overlap_hides_gradient_reduction():
    kw = dict(gpu="h100", num_gpus=64, micro_batch=1, global_batch=64, seq_len=4096)
    on = simulate(make_training_job("llama3-8b", plan="tp=1,pp=1,dp=64,zero=1", **kw))
    off = simulate(make_training_job("llama3-8b", plan="tp=1,pp=1,dp=64,zero=1,overlap_dp_comm=0,"
                                                      "overlap_param_gather=0", **kw))
    assert off.step_time_s > on.step_time_s
    tail_on = on.ranks[0].summary()["dp_tail_s"]
    tail_off = off.ranks[0].summary()["dp_tail_s"]
    assert tail_off > 2 * tail_on


# ---- what only the replay shows: a slow GPU ---------------------------------------------------------
@pytest.fixture(scope="module")
def pipeline_job():
    return make_training_job("llama3-70b", gpu="h100", num_gpus=64, plan="tp=4,pp=4,dp=4,sp=1", micro_batch=1,
                             global_batch=64, seq_len=4096)


def test_a_slowdown_of_one_is_no_slowdown(pipeline_job):
    base = simulate(pipeline_job)
    same = simulate(pipeline_job, slow_rank=17, slowdown=1.0)
    assert same.step_time_s == pytest.approx(base.step_time_s, rel=1e-12)
    assert same.baseline_step_time_s == pytest.approx(base.step_time_s, rel=1e-12)


def test_slow_gpu_propagates_through_pipeline_and_dp_sync(pipeline_job):
    base = simulate(pipeline_job)
    slow_rank = 63                               # stage 3 (the last, with the LM head), replica 3
    r = simulate(pipeline_job, slow_rank=slow_rank, slowdown=1.1)
    assert r.baseline_step_time_s == pytest.approx(base.step_time_s)
    assert r.step_time_s > base.step_time_s * 1.02
    # 2 x pp simulated ranks: the slow GPU's replica and one healthy replica, standing for all 64
    assert len(r.ranks) == 8 and sum(x.represents for x in r.ranks) == 64
    me, member = r.rank_for(slow_rank)
    assert me.stage == 3 and me.replica == "slow" and member == 0 and me.factors == (1.1, 1.0)
    # pipeline: the stages of its own replica wait for it (idle grows, work does not)
    for x in r.ranks:
        if x.replica == "slow" and x.stage < 3:
            b = next(y for y in base.ranks if y.stage == x.stage)
            assert x.summary()["idle_s"] > b.summary()["idle_s"]
            assert x.summary()["compute_busy_s"] == pytest.approx(b.summary()["compute_busy_s"])
    # DP sync: healthy replicas finish their backward on time (a little earlier even: their gradient buckets,
    # waiting for the slow replica, no longer share the NIC with their pipeline sends), then wait
    healthy = next(x for x in r.ranks if x.replica == "healthy" and x.stage == 0)
    b0 = base.ranks[0]
    assert healthy.last_backward_end_s == pytest.approx(b0.last_backward_end_s, rel=1e-3)
    assert healthy.last_backward_end_s <= b0.last_backward_end_s
    assert healthy.summary()["dp_tail_s"] > b0.summary()["dp_tail_s"] + 0.05
    # it ends with the step, but for the slowdown its overlapped DP traffic imposed on its own compute
    # (schedule.overlap_compute_slowdown, added per rank after the replay)
    assert healthy.end_s == pytest.approx(r.step_time_s, rel=0.01) and healthy.end_s <= r.step_time_s


def test_where_the_slow_gpu_sits_matters(pipeline_job):
    # the last stage carries the head and sets the pace: a slow GPU there costs more than in stage 0
    first = simulate(pipeline_job, slow_rank=0, slowdown=1.1, baseline=False).step_time_s
    last = simulate(pipeline_job, slow_rank=63, slowdown=1.1, baseline=False).step_time_s
    assert last > first


def test_expert_parallel_replicas_run_in_the_slow_gpus_lockstep():
    job = make_training_job("mixtral-8x7b", gpu="h100", num_gpus=64, plan="tp=2,pp=4,ep=4,dp=8,sp=1", micro_batch=1,
                            global_batch=64, seq_len=4096)
    r = simulate(job, slow_rank=5, slowdown=1.2)
    slow = [x for x in r.ranks if x.replica == "slow"]
    assert {x.represents for x in slow} == {8}      # 4 replicas coupled through the all-to-alls, x tp=2
    assert sum(x.represents for x in r.ranks) == 64
    assert r.step_time_s > r.baseline_step_time_s


def test_fsdp_replays_per_layer_gathers():
    job = make_training_job("llama3-8b", gpu="h100", num_gpus=64, plan="tp=2,dp=32,zero=3", micro_batch=1,
                            global_batch=64, seq_len=8192, framework="torchtitan")
    r = simulate(job)
    gathers = [t for t in r.ranks[0].tasks if t.stream == "dp_comm" and "param_all_gather" in t.name]
    layers = job.model.num_layers
    assert len(gathers) >= 2 * layers * r.num_microbatches     # forward and backward, per layer and micro-batch
    assert r.step_time_s == pytest.approx(predict_job(job).mean_gpu_step_time_s, rel=0.05)


# ---- bad input -------------------------------------------------------------------------------------
def test_bad_slow_rank_and_slowdown_are_one_line_errors():
    job = _tiny_job()
    with pytest.raises(ClusterTwinError, match="slow_rank"):
        simulate(job, slow_rank=16)
    with pytest.raises(ClusterTwinError, match="slowdown"):
        simulate(job, slow_rank=0, slowdown=0.0)


def test_sim_cli(capsys):
    code = main(["sim", "--model", "llama3-70b", "--gpu", "h100", "-n", "64", "--plan", "tp=4,pp=4,dp=4,sp=1",
                 "--global-batch", "64", "--seq-len", "4096", "--slow-rank", "63", "--slowdown", "1.1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    import json
    data = json.loads(out)
    assert data["schema"] == 1 and data["slow_rank"] == 63 and data["simulated_ranks"] == 8
    assert data["step_time_s"] > data["baseline_step_time_s"]
    assert abs(data["baseline_step_time_s"] / (data["predicted_step_time_s"] - data["predicted_stragglers_s"]) - 1) < 0.05
    code = main(["sim", "--slow-rank", "99999"])
    out, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "slow_rank" in err
    code = main(["sim", "--slowdown", "-1", "--slow-rank", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and "slowdown" in err


def test_sim_cli_table_and_timeline(capsys, tmp_path):
    path = tmp_path / "t.json"
    code = main(["sim", "--timeline", str(path), "--detail", "layer"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "step time (sim)" in out and "step time (predict)" in out and path.exists()


def test_recompute_runs_inside_the_backward():
    job = make_training_job("gpt3-175b", gpu="a100-80gb", num_gpus=64, plan="tp=8,pp=8,dp=1,recompute=full",
                            micro_batch=1, global_batch=16, seq_len=2048)
    r = simulate(job)
    b = next(t for t in r.ranks[1].tasks if t.phase == "B")
    seg, _, mp = b.segments[0]
    phases = [st.op.phase for st in mp.program.steps]
    assert phases[0] == Phase.RECOMPUTE and Phase.BWD in phases
    assert r.step_time_s == pytest.approx(predict_job(job).mean_gpu_step_time_s, rel=0.05)


def test_sim_flags_a_plan_that_does_not_fit(capsys) -> None:
    """A step time of a plan that does not fit in memory is never shown without saying so."""
    import json

    from clustertwin.cli import main
    argv = ["sim", "-m", "llama3.1-405b", "--gpu", "h100", "-n", "64", "--plan", "tp=8,pp=8"]
    assert main(argv) == 0
    assert "does NOT fit" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is False and data["memory_per_gpu_bytes"] > 80e9
