"""Megatron-Core's EP all-to-all overlap (--overlap-moe-expert-parallel-comm, combined 1F1B): the schedule
formula, the plan's checks, and validate applying it only where a row says its recipe turns it on."""
import csv
from pathlib import Path

import pytest

from clustertwin.errors import PlanError
from clustertwin.predict import predict_job
from clustertwin.schedule.step import (EP_OVERLAP_COMM_SMS, StageTime, compose_step, dualpipe_exposed_ep,
                                       ep_overlap_exposed_ep, ep_overlap_unpaired)
from clustertwin.specs.framework import get_framework
from clustertwin.specs.plan import make_plan, parse_plan
from clustertwin.validate.runs import job_from_row, read_runs

MOE_RUNS = Path(__file__).resolve().parents[1] / "data" / "validation" / "moe_public_runs.csv"
QWEN_H100 = "mbridge25.11-h100-qwen3-235b-a22b-fp8cs-256gpu"


def _stage(i=0, fwd=1.0, bwd=2.0, ep=1.5):
    return StageTime(i, fwd_s=fwd, bwd_s=bwd, ep_s=ep)


def test_unpaired_share_is_the_warmup_of_the_first_stage():
    # no pipeline: the first forward and the last backward run alone
    assert ep_overlap_unpaired(10, 1, 1) == pytest.approx(1 / 10)
    # interleaved: 2(p-1) + (v-1)p + 1 chunk forwards of m v (schedules.py warm-up, +1 with the overlap)
    assert ep_overlap_unpaired(128, 8, 4) == pytest.approx((2 * 7 + 3 * 8 + 1) / (128 * 4))
    # never more than all of them
    assert ep_overlap_unpaired(2, 8, 4) == 1.0


def test_exposed_ep_hand_checked():
    st = _stage()
    sms, comm = 132, 32
    pair = max(1.5 * comm / sms, 1.5 - 3.0)          # compute (3 s) outlasts the all-to-all: only the SM share
    assert dualpipe_exposed_ep(st, sms, comm) == pytest.approx(pair)
    assert ep_overlap_exposed_ep(st, sms, comm, 0.1) == pytest.approx(0.1 * 1.5 + 0.9 * pair)
    # all-to-all longer than the compute beside it: what outlasts it stays
    big = _stage(ep=5.0)
    assert dualpipe_exposed_ep(big, sms, comm) == pytest.approx(5.0 - 3.0)


def test_compose_step_with_overlap_no_pipeline():
    st, m = _stage(), 10
    plain, _ = compose_step([st], [0], [1e9], m, 1, 1, True, True, True)
    over, _ = compose_step([st], [0], [1e9], m, 1, 1, True, True, True, ep_overlap=(132, 32))
    assert plain["ep_comm"] == pytest.approx(m * 1.5)
    assert over["ep_comm"] == pytest.approx(m * ep_overlap_exposed_ep(st, 132, 32, 1 / m))
    # only the all-to-all changes
    for k in plain:
        if k != "ep_comm":
            assert over[k] == pytest.approx(plain[k])


def test_overlap_never_slower_and_nothing_without_all_to_all():
    p, v, m = 4, 2, 16
    stages = [_stage(i, ep=e) for i, e in enumerate((0.5, 1.0, 4.0, 0.0))]
    plain, _ = compose_step(stages, list(range(p)), [1e9] * p, m, p, v, True, True, True)
    over, _ = compose_step(stages, list(range(p)), [1e9] * p, m, p, v, True, True, True, ep_overlap=(132, 32))
    assert sum(over.values()) <= sum(plain.values())
    # the fill and drain run unpaired chunks: the bubble keeps the exposed all-to-alls
    assert over["bubble"] == pytest.approx(plain["bubble"])
    none = [_stage(i, ep=0.0) for i in range(p)]
    a, _ = compose_step(none, list(range(p)), [1e9] * p, m, p, v, True, True, True)
    b, _ = compose_step(none, list(range(p)), [1e9] * p, m, p, v, True, True, True, ep_overlap=(132, 32))
    assert a == pytest.approx(b)


def test_more_comm_sms_never_faster():
    st = _stage(fwd=2.0, bwd=4.0, ep=1.0)
    assert ep_overlap_exposed_ep(st, 132, 20, 0.1) <= ep_overlap_exposed_ep(st, 132, 32, 0.1)
    assert set(EP_OVERLAP_COMM_SMS) == {"alltoall", "deepep"}


def test_plan_checks_megatron_core_conditions():
    # interleaving is required with a pipeline (transformer_config.py), full recompute refused, not with DualPipe
    with pytest.raises(PlanError, match="overlap_ep_comm"):
        make_plan(tp=1, pp=4, vpp=1, ep=8, overlap_ep_comm=True)
    with pytest.raises(PlanError, match="overlap_ep_comm"):
        make_plan(tp=1, pp=4, vpp=2, ep=8, recompute="full", overlap_ep_comm=True)
    with pytest.raises(PlanError, match="overlap_ep_comm"):
        make_plan(tp=1, pp=4, ep=8, pp_schedule="dualpipe", overlap_ep_comm=True)
    assert make_plan(tp=1, pp=1, ep=8, overlap_ep_comm=True).overlap_ep_comm is True
    assert parse_plan("tp=1,pp=4,vpp=2,ep=8,overlap_ep_comm=1").overlap_ep_comm is True


def test_off_by_default_in_every_stack():
    for name in ("megatron", "megatron-core@2024", "nemo", "nemo@25.02", "hai-llm", "torchtitan"):
        assert get_framework(name).overlap_ep_comm is False


def _row(run_id):
    return next(r for r in read_runs(MOE_RUNS) if r.run_id == run_id)


def test_validate_applies_the_recipe_column():
    row = _row(QWEN_H100)
    assert row.raw["ep_overlap"] == "1"
    job = job_from_row(row)
    assert job.plan.overlap_ep_comm is True
    on = predict_job(job)
    off = predict_job(job.model_copy(update={"plan": job.plan.model_copy(update={"overlap_ep_comm": False})}))
    assert on.step.step_time_s < off.step.step_time_s
    assert on.step.breakdown_s["ep_comm"] < off.step.breakdown_s["ep_comm"]
    # the stages' compute is the same (which stage paces the pipeline may change)
    for a, b in zip(on.step.stages, off.step.stages):
        assert a.fwd_s + a.bwd_s == pytest.approx(b.fwd_s + b.bwd_s)


def test_replay_refuses_the_combined_schedule():
    from clustertwin.sim import simulate
    job = job_from_row(_row(QWEN_H100))
    with pytest.raises(PlanError, match="overlap_ep_comm"):
        simulate(job)


def test_validate_states_the_assumption_where_the_row_is_silent():
    rows = list(csv.DictReader(MOE_RUNS.open(newline="", encoding="utf-8")))
    silent = next(r for r in rows if not r["ep_overlap"] and int(r["ep"] or 1) > 1)
    row = _row(silent["run_id"])
    job = job_from_row(row)
    assert not job.plan.overlap_ep_comm
    assert any("EP all-to-all overlap unknown" in n for n in row.assumptions)


def test_rows_that_say_on_can_run_it():
    # every row whose recipe turns the overlap on is one Megatron-Core can run it on: ep > 1, and interleaved
    # or without a pipeline
    for r in csv.DictReader(MOE_RUNS.open(newline="", encoding="utf-8")):
        if r["ep_overlap"] == "1":
            assert int(r["ep"]) > 1 and (int(r["pp"]) == 1 or int(r["vpp"] or 1) > 1), r["run_id"]
