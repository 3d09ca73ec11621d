"""The one pricing pipeline (schedule.batch): predict is a batch of one, and what it reports per stage."""
from __future__ import annotations

import pytest

from clustertwin import predict
from clustertwin.catalog import cluster_for_gpu, load_model
from clustertwin.calibrate.profile import profile_for
from clustertwin.predict import make_training_job, predict_job
from clustertwin.schedule import batch
from clustertwin.schedule.batch import BatchPricer, PlanSet, Structure, TopK, plan_set_of


def test_memory_of_every_stage() -> None:
    """Each stage's breakdown: the critical stage's is the one reported, no stage holds more, and
    under 1F1B a later stage holds fewer micro-batches' activations (Megatron's warm-up depth)."""
    r = predict("llama3-8b", gpu="h100-sxm", num_gpus=32, plan="tp=2,pp=4,sp=1", micro_batch=1, global_batch=64,
                seq_len=4096)
    stages = r.memory.stages_bytes()
    assert len(stages) == 4
    totals = [sum(s.values()) for s in stages]
    assert totals[r.memory.critical_stage] == pytest.approx(r.memory.total_bytes, rel=1e-12)
    assert stages[r.memory.critical_stage] == pytest.approx(r.memory.breakdown_bytes, rel=1e-12)
    assert max(totals) == pytest.approx(r.memory.total_bytes, rel=1e-12)
    acts = [s["activations"] for s in stages]
    assert acts[1] > acts[2]          # middle stages: same layers, fewer micro-batches in flight


def test_step_stages_are_every_stage_in_order() -> None:
    r = predict("llama3-8b", gpu="h100-sxm", num_gpus=32, plan="tp=2,pp=4,vpp=2,sp=1", micro_batch=1,
                global_batch=64, seq_len=4096)
    assert [s.stage for s in r.step.stages] == [0, 1, 2, 3]
    assert r.step.critical_stage in range(4)
    assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-12)


def test_reused_pricer_gives_the_same_numbers() -> None:
    """Predictions of one job share a BatchPricer (its priced shape classes); interleaving other
    plans of the job must not change a plan's numbers."""
    batch._PRICERS.clear()
    kw = dict(gpu="h100-sxm", num_gpus=16, micro_batch=1, global_batch=32, seq_len=4096)
    first = predict_job(make_training_job("llama3-8b", plan="tp=2,pp=2,sp=1,recompute=selective", **kw))
    for plan in ("tp=4,pp=1,sp=1", "tp=1,pp=4,zero=3", "tp=2,pp=2,cp=2,recompute=full"):
        predict_job(make_training_job("llama3-8b", plan=plan, **kw))
    batch._PRICERS.clear()
    again = predict_job(make_training_job("llama3-8b", plan="tp=2,pp=2,sp=1,recompute=selective", **kw))
    assert again.step_time_s == first.step_time_s
    assert again.breakdown_s == first.breakdown_s
    assert again.memory.breakdown_bytes == first.memory.breakdown_bytes


def test_a_plan_alone_and_in_a_batch_price_alike() -> None:
    """The same structure priced with its options fixed (predict's PlanSet) and inside a PlanSet that
    searches the options (search's) gives the same step time for the same options."""
    m, c = load_model("gpt3-1.3b"), cluster_for_gpu("a100-80gb", 8)
    job = make_training_job(m, cluster=c, plan="tp=2,pp=2,sp=1,recompute=selective,zero=1", micro_batch=2,
                            global_batch=16, seq_len=2048)
    pred = predict_job(job)
    alone, s = plan_set_of(pred.graph.plan, m, c, 2048, "megatron")
    searched = PlanSet(m, c, 16, 2048, "bf16", "megatron", {}, float("inf"))
    keep = TopK(10**6)
    pricer = BatchPricer(searched, profile_for(c.gpu))
    pricer.price([s], keep)
    target = pred.graph.plan
    hits = []
    for t, _mem, ref, i in keep.best():
        p = pricer.candidate(ref, i).plan(searched)
        if all(getattr(p, k) == getattr(target, k) for k in ("sp", "recompute", "zero_stage", "overlap_tp_comm",
                                                              "overlap_dp_comm", "overlap_param_gather",
                                                              "overlap_pp_comm")):
            hits.append(t)
    assert len(hits) == 1 and hits[0] == pytest.approx(pred.step_time_s, rel=1e-12)
    assert isinstance(s, Structure) and alone.fixed["recompute"] == "selective"


def test_pricer_refuses_another_job() -> None:
    m, c = load_model("gpt3-1.3b"), cluster_for_gpu("a100-80gb", 8)
    pricer = BatchPricer(PlanSet(m, c, 16, 2048))
    with pytest.raises(ValueError, match="one job"):
        pricer.price([], TopK(1), PlanSet(m, c, 16, 1024))
