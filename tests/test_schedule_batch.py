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


# ---- stacked pricing: many shape classes at once, the same figures as one by one -------------------
@pytest.mark.parametrize("model,gpu,n,gb,seq,kw", [
    ("mixtral-8x7b", "h100-sxm", 32, 32, 4096, {"fix": "dispatcher=deepep"}),    # EP across nodes, imbalance
    ("qwen1.5-moe-a2.7b", "h100-sxm", 16, 64, 4096, {"precision": "fp8"}),       # shared experts, fp8 casts
    ("gpt3-1.3b", "a100-80gb", 32, 64, 2048, {"fix": "attention_kernel=unfused"}),  # score GEMMs, dropout
    ("llama3-8b", "a100-80gb", 16, 32, 4096, {"framework": "torchtitan"}),        # op-level SAC, eager kernels
    ("deepseek-v3", "h800", 256, 128, 4096, {"fix": "micro_batch=1"}),           # MLA, dense + MoE layers
])
def test_stacked_pricing_equals_one_by_one(model, gpu, n, gb, seq, kw, monkeypatch) -> None:
    """Every shape class a search prices stacked (ManyPricer over stacked contexts) has, bit for bit,
    the blocks the per-class Pricer gives (the path of a measured profile and of a few classes)."""
    import numpy as np
    from clustertwin.search import make_space

    sp = make_space(load_model(model), cluster_for_gpu(gpu, n), gb, seq, **kw)
    structures = sp.structures()[0]
    stacked = BatchPricer(sp, profile_for(sp.cluster.gpu))
    stacked.run(structures, 5)
    codes = np.flatnonzero(stacked._ids >= 0)
    assert codes.size >= 20
    monkeypatch.setattr(batch, "_STACK_FROM", 10**9)         # price one by one
    single = BatchPricer(sp, profile_for(sp.cluster.gpu))
    for c in stacked._contexts:
        single.context_id(c.tp, c.cp, c.micro_batch, c.sp, c.ep)
    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(codes, size=min(codes.size, 300), replace=False))
    assert np.array_equal(stacked.blocks(sample), single.blocks(sample))


def test_stacked_contexts_branch_alike() -> None:
    """Contexts of different op-list structure are never stacked: stack_key tells them apart, and
    the builders refuse a stack whose contexts would take different branches."""
    import numpy as np
    from types import SimpleNamespace
    from clustertwin.specs.framework import get_framework
    from clustertwin.workload.graph import layer_context
    from clustertwin.workload.transformer import layer_ops, stack_contexts, stack_key

    m = load_model("mixtral-8x7b")

    def ctx(tp, ep):
        plan = SimpleNamespace(tp=tp, cp=1, ep=ep, etp=None, micro_batch=1, sp=tp > 1, precision="bf16",
                               attention_kernel="flash", moe_dispatcher="alltoall", moe_routing="uniform",
                               moe_placement="sequential", moe_capacity_factor=None)
        return layer_context(m, plan, 4096, get_framework("megatron"))

    assert stack_key(ctx(1, 2)) != stack_key(ctx(2, 2)) and stack_key(ctx(2, 1)) != stack_key(ctx(2, 2))
    vc = stack_contexts([ctx(2, 2), ctx(4, 2)])
    assert isinstance(vc.tp, np.ndarray) and vc.seq_len == 4096        # equal fields stay scalars
    fwd, _, _ = layer_ops.__wrapped__(vc, True)
    assert [op.name for op in fwd] == [op.name for op in layer_ops(ctx(2, 2), True)[0]]
    with pytest.raises(ValueError):
        layer_ops.__wrapped__(stack_contexts([ctx(1, 2), ctx(2, 2)]), False)


def test_few_collectives_priced_one_by_one_as_many() -> None:
    """predict's batch of one prices its DP and pipeline collectives with NetworkPricer.time, one call
    each: the same seconds as time_many gives a batch, bit for bit, on every placement."""
    import numpy as np
    from clustertwin.cost.network import NetworkPricer
    from clustertwin.parallel.layout import place_group

    cluster = cluster_for_gpu("h100-sxm", 1024)
    net = NetworkPricer(cluster, profile_for(cluster.gpu))
    pls = [place_group(size, stride, 8) for size in (1, 2, 8, 16, 128) for stride in (1, 8)]
    rng = np.random.default_rng(1)
    for kind in ("all_gather", "reduce_scatter", "all_reduce", "send_recv"):
        nbytes = np.concatenate([[0.0, 1.0], rng.uniform(0, 1e10, 40)])
        idx = rng.integers(0, len(pls), nbytes.size)
        many = batch._ring_times(net, kind, nbytes, pls, idx)
        assert np.array_equal(many, net.time_many(kind, nbytes, pls, idx))
        for i in range(0, nbytes.size, 2):
            assert np.array_equal(batch._ring_times(net, kind, nbytes[i:i + 2], pls, idx[i:i + 2]), many[i:i + 2])


def test_graph_of_a_job_built_once() -> None:
    """build_graph returns a recent job's graph again (jobs are frozen); another job, or the same
    job under another framework, gets its own."""
    from clustertwin.workload.graph import build_graph

    job = make_training_job("llama3-8b", gpu="h100-sxm", num_gpus=16, plan="tp=2,pp=2,sp=1", micro_batch=1,
                            global_batch=32, seq_len=4096)
    other = make_training_job("llama3-8b", gpu="h100-sxm", num_gpus=16, plan="tp=4,pp=2,sp=1", micro_batch=1,
                              global_batch=32, seq_len=4096)
    g = build_graph(job)
    assert build_graph(job) is g and build_graph(other) is not g
    assert build_graph(other).plan.tp == 4 and build_graph(job, "torchtitan").framework.name != g.framework.name
