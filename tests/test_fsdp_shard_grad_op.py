"""ZeRO-2 under an FSDP stack is FSDP's SHARD_GRAD_OP (FSDP1 ShardingStrategy.SHARD_GRAD_OP; FSDP2
fully_shard with reshard_after_forward=False): each unit is all-gathered before its forward, kept for
its backward, and its gradients reduce-scattered after it, one ring collective per unit and micro-batch,
each paying the ring's (N - 1) step latencies. Megatron-Core's ZeRO-2 stays a bucketed step-level
reduce-scatter and one parameter all-gather."""
from __future__ import annotations

import pytest

from clustertwin.catalog import cluster_for_gpu
from clustertwin.predict import make_training_job, predict_job
from clustertwin.schedule.step import OVERLAP_SLOWDOWN as D, exposed_fsdp
from clustertwin.specs.framework import get_framework
from clustertwin.specs.framework import fsdp_per_unit
from clustertwin.workload.graph import build_graph, dp_collectives


def test_no_backward_regather_by_hand():
    """10 units, 1 s of gathers and 0.5 s of reduce-scatters per pass, ample compute: the first unit's
    gather (0.1) and the last unit's reduce-scatter (0.05) stay exposed, the other 1.35 s hide and slow
    the compute by D per second; ZeRO-3 adds the backward's re-gather (test_constants' case)."""
    assert exposed_fsdp(1.0, 0.5, 10, 10.0, 20.0, True, regather=False) == pytest.approx(0.1 + 0.05 + D * 1.35)
    assert exposed_fsdp(1.0, 0.5, 10, 10.0, 20.0, False, regather=False) == pytest.approx(1.5)
    assert exposed_fsdp(1.0, 0.5, 10, 10.0, 20.0, True) == pytest.approx(0.1 + 0.1 + 0.05 + D * 2.25)
    # collectives outlast the compute (a = 0.1 s against c_f = 0.05 s a unit; r = 0.05 against c_b = 0.01):
    # forward a + 9 (a - c_f), backward r + 9 (r - c_b)
    fwd = 0.1 + 9 * (0.1 - 0.05)
    bwd = 0.05 + 9 * (0.05 - 0.01)
    assert exposed_fsdp(1.0, 0.5, 10, 0.5, 0.1, True, regather=False) == pytest.approx(fwd + bwd + D * (1.5 - fwd - bwd))


def test_collectives_of_each_stack():
    assert fsdp_per_unit(2, get_framework("llm-foundry-flash"))
    assert fsdp_per_unit(2, get_framework("torchtitan"))
    assert not fsdp_per_unit(2, get_framework("megatron"))
    assert not fsdp_per_unit(2, get_framework("deepspeed"))
    names = [c[0] for c in dp_collectives(2, shard_grad_op=True)]
    assert names == ["fsdp.param_all_gather.fwd", "fsdp.grad_reduce_scatter"]
    assert all(c[3] for c in dp_collectives(2, shard_grad_op=True))          # per micro-batch
    assert [c[0] for c in dp_collectives(2)] == ["dp.grad_reduce_scatter", "dp.param_all_gather"]


def _job(framework: str, num_gpus: int, zero: int = 2, **kw):
    return make_training_job("llama3-8b", gpu="h100", num_gpus=num_gpus, plan=f"dp={num_gpus},zero={zero}",
                             micro_batch=1, global_batch=2 * num_gpus, seq_len=2048, framework=framework, **kw)


def test_graph_gathers_in_the_forward_only():
    """llm-foundry's ZeRO-2: per micro-batch, the forward gathers every parameter once (16-bit), the
    backward reduce-scatters them (fp32 under mixed precision DEFAULT); no step-level DP collective."""
    stage = build_graph(_job("llm-foundry-flash", 16)).stages[0]
    ops = {op.name: op for op in stage.microbatch_dp_ops if op.is_comm}
    assert set(ops) == {"fsdp.param_all_gather.fwd.dp_cp", "fsdp.grad_reduce_scatter.dp_cp"}
    assert ops["fsdp.grad_reduce_scatter.dp_cp"].comm_bytes == pytest.approx(
        2 * ops["fsdp.param_all_gather.fwd.dp_cp"].comm_bytes)
    assert not [op for op in stage.step_ops if op.is_comm]


@pytest.mark.parametrize("framework", ["llm-foundry-flash", "torchtitan"])
def test_more_ranks_never_faster(framework):
    """Per unit, each ring pays N - 1 latencies: at a fixed per-GPU batch the FSDP time never falls as the
    data-parallel group grows."""
    comm = [predict_job(_job(framework, n)).breakdown_s["dp_comm"] for n in (16, 64, 256, 512)]
    assert comm == sorted(comm)


def test_more_nic_bandwidth_never_slower():
    cluster = cluster_for_gpu("h100-sxm", 128)
    node = cluster.node.model_copy(update={"nic_bandwidth_bytes_per_s": 4 * cluster.node.nic_bandwidth_bytes_per_s})
    fast = cluster.model_copy(update={"node": node})
    base = predict_job(make_training_job("llama3-8b", cluster=cluster, plan="dp=128,zero=2", micro_batch=1,
                                         global_batch=256, seq_len=2048, framework="llm-foundry-flash"))
    quick = predict_job(make_training_job("llama3-8b", cluster=fast, plan="dp=128,zero=2", micro_batch=1,
                                          global_batch=256, seq_len=2048, framework="llm-foundry-flash"))
    assert quick.step_time_s <= base.step_time_s * (1 + 1e-12)
    assert sum(base.breakdown_s.values()) == pytest.approx(base.step_time_s)


@pytest.mark.parametrize("framework,plan", [("llm-foundry-flash", "dp=16"), ("torchtitan", "dp=16"),
                                            ("torchtitan", "pp=2,dp=8")])
def test_replay_agrees_with_the_analytic_step(framework, plan):
    """The replay runs the graph's per-unit collectives (no backward gather at ZeRO-2; once per step under
    PP): it and the analytic step agree on ZeRO-2 as they do on ZeRO-3 of the same job (their gap there
    is the unequal root unit's, test_sim_predict_fsdp)."""
    from clustertwin.sim.replay import simulate

    def gap(zero: int) -> float:
        job = make_training_job("llama3-8b", gpu="h100", num_gpus=16, plan=f"{plan},zero={zero}", micro_batch=1,
                                global_batch=32, seq_len=2048, framework=framework)
        return simulate(job, baseline=False).step_time_s / predict_job(job).mean_gpu_step_time_s - 1
    z2 = gap(2)
    assert abs(z2) < 0.03
    assert abs(z2 - gap(3)) < 0.01


def test_shard_grad_op_memory_by_hand():
    """SHARD_GRAD_OP's memory: the fp32 weights and the gradients sharded as at ZeRO-3 (parameters are
    sharded outside computation, gradients reduce-scattered per unit into the shard), and every unit's
    gathered 16-bit weights held from its forward to its backward (2 bytes a parameter, all units at the
    start of the backward) where ZeRO-3 holds two units'. Llama 3 8B on 8 H100s, torchtitan eager."""
    kw = dict(gpu="h100", num_gpus=8, micro_batch=1, global_batch=32, seq_len=8192, framework="torchtitan-eager")
    from clustertwin.catalog import load_model
    model = load_model("llama3-8b")
    z2 = predict_job(make_training_job(model, plan="dp=8,zero=2,recompute=full", **kw))
    z3 = predict_job(make_training_job(model, plan="dp=8,zero=3,recompute=full", **kw))
    m2, m3 = z2.memory, z3.memory
    b2, b3 = m2.breakdown_bytes, m3.breakdown_bytes
    assert b2["weights"] == pytest.approx(b3["weights"], rel=1e-12)
    assert b2["gradients"] == pytest.approx(b3["gradients"], rel=1e-12)
    n = model.params_total
    # the difference is every unit's gathered weights (2 bytes a parameter) less what ZeRO-3 holds gathered:
    # two layer units and the root unit (embedding and head, FSDP2 keeps it gathered)
    emb = model.params_embedding
    layer = (n - emb) / model.num_layers
    assert m2.total_bytes - m3.total_bytes == pytest.approx(2 * n - 2 * (2 * layer + emb), rel=1e-3)
    assert m3.total_bytes < m2.total_bytes < 80e9 * 0.8          # fits, as it does in practice
    # Megatron-Core's ZeRO-2 (step-level buckets) keeps the whole gradient buffer with accumulation
    mc = predict_job(make_training_job(model, plan="dp=8,zero=2,recompute=full",
                                       **{**kw, "framework": "megatron"}))
    assert mc.memory.breakdown_bytes["gradients"] > 4 * b2["gradients"]
