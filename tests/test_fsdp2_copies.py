"""FSDP2's copy-out (after each all-gather) and copy-in (before each reduce-scatter) are ops of the
workload graph, built from the one definition (workload/graph.py fsdp2_copies), so predict's batch
pricing, the discrete-event replay and the exporters all count them once."""
from __future__ import annotations

import pytest

import clustertwin as ct
from clustertwin.predict import make_training_job
from clustertwin.schedule.step import Pricer
from clustertwin.sim.replay import simulate
from clustertwin.specs.framework import get_framework
from clustertwin.specs.model import ModelSpec
from clustertwin.workload.graph import build_graph, fsdp2_copy_bytes
from clustertwin.workload.ops import OpKind, Phase

# sim and predict share the graph and the op prices; they differ only in how the replay overlaps what
# the analytic step composes (prefetch under copies, processor-shared links): within half a percent
SIM_PREDICT_TOLERANCE = 0.005


def _tiny(**kw):
    """2 layers, hidden 256 (4 heads, 2 KV heads of 64), SwiGLU FFN 512, vocab 1024, untied head.
    Parameters by hand: a layer 256^2 (q) + 2 x 256 x 128 (k, v) + 256^2 (o) + 3 x 256 x 512 (MLP)
    + 2 x 256 (norms) = 590,336; two of them, the final norm (256), embedding and head (2 x 262,144):
    1,705,216."""
    m = ModelSpec(name="tiny-llama", num_layers=2, hidden_size=256, num_heads=4, num_kv_heads=2, ffn_hidden_size=512,
                  vocab_size=1024, max_seq_len=512, activation="swiglu", norm="rmsnorm", positions="rope", bias=False)
    args = dict(gpu="h100", num_gpus=8, plan="dp=8,zero=3", micro_batch=1, global_batch=16, seq_len=512,
                framework="torchtitan")
    args.update(kw)
    return make_training_job(m, **args)


TINY_PARAMS = 2 * (256 * 256 + 2 * 256 * 128 + 256 * 256 + 3 * 256 * 512 + 2 * 256) + 256 + 2 * 1024 * 256
TINY_ROOT = 2 * 1024 * 256      # the root unit's embedding and head (its final norm is counted with the layers)


def _copies(ops):
    return {op.name: op for op in ops if op.name.startswith("fsdp2.")}


def test_graph_carries_the_copies_with_their_bytes_by_hand():
    g = build_graph(_tiny())
    assert TINY_PARAMS == 1_705_216 == g.stages[0].params.total
    ops = _copies(g.stages[0].microbatch_dp_ops)
    assert set(ops) == {"fsdp2.copy_out.fwd.dp_cp", "fsdp2.copy_out.bwd.dp_cp", "fsdp2.copy_in.dp_cp"}
    gb = get_framework("torchtitan").grad_reduce_bytes
    assert gb == 4
    # copy-out: read and write one bf16 element per parameter; copy-in: read bf16, write the fp32 buffer
    # the backward copies out the two layer units only: the root (embedding, head) stays gathered from
    # the forward (FSDP2 does not reshard the root after the forward)
    assert ops["fsdp2.copy_out.fwd.dp_cp"].bytes == TINY_PARAMS * 4
    assert ops["fsdp2.copy_out.bwd.dp_cp"].bytes == (TINY_PARAMS - TINY_ROOT) * 4
    assert ops["fsdp2.copy_in.dp_cp"].bytes == TINY_PARAMS * (2 + 4)
    assert sum(op.bytes for op in ops.values()) == pytest.approx(fsdp2_copy_bytes(TINY_PARAMS, 2, gb) - TINY_ROOT * 4)
    for op in ops.values():
        assert op.kind == OpKind.ELEMENTWISE and not op.is_comm and op.stream.value == "compute"
    # a kernel per FSDP unit: two layers, and the root (embedding, head), which the backward skips
    assert ops["fsdp2.copy_out.fwd.dp_cp"].kernels == ops["fsdp2.copy_in.dp_cp"].kernels == 3
    assert ops["fsdp2.copy_out.bwd.dp_cp"].kernels == 2
    assert ops["fsdp2.copy_out.fwd.dp_cp"].phase == Phase.FWD
    assert ops["fsdp2.copy_in.dp_cp"].phase == Phase.BWD
    assert not _copies(g.stages[0].step_ops)


def test_copies_once_per_step_under_pipeline_parallelism():
    g = build_graph(_tiny(plan="pp=2,dp=4,zero=3", global_batch=8))
    for sg in g.stages:
        assert not _copies(sg.microbatch_dp_ops)
        ops = _copies(sg.step_ops)
        assert set(ops) == {"fsdp2.copy_out.dp_cp", "fsdp2.copy_in.dp_cp"}
        n = sg.params.total
        assert ops["fsdp2.copy_out.dp_cp"].bytes == n * 4       # gathered once: one copy-out
        assert ops["fsdp2.copy_in.dp_cp"].bytes == n * 6
        assert ops["fsdp2.copy_in.dp_cp"].kernels == 2          # one layer and the embedding or the head


@pytest.mark.parametrize("framework,plan", [("megatron", "dp=8,zero=3"), ("torchtitan", "dp=8,zero=0")])
def test_no_copies_without_fsdp2(framework, plan):
    g = build_graph(_tiny(framework=framework, plan=plan))
    assert not _copies(g.stages[0].microbatch_dp_ops) and not _copies(g.stages[0].step_ops)


def test_replay_runs_each_copy_once_per_micro_batch():
    job = _tiny()
    r = simulate(job)
    g = r.graph
    pricer = Pricer(g)
    ops = _copies(g.stages[0].microbatch_dp_ops)
    tasks = [t for t in r.ranks[0].tasks if t.op is not None and t.op.name.startswith("fsdp2.")]
    assert all(t.stream == "compute" for t in tasks)
    for name, op in ops.items():
        mine = [t for t in tasks if t.op.name == name]
        # each layer's share, every micro-batch: the shares of one micro-batch add up to the whole op
        assert sum(t.fraction for t in mine) == pytest.approx(g.num_microbatches)
        assert sum(t.end_s - t.start_s for t in mine) == pytest.approx(g.num_microbatches * pricer.time(op))


def _agree(job):
    p = ct.predict_job(job)
    assert sum(p.breakdown_s.values()) == pytest.approx(p.step_time_s)
    s = simulate(job, baseline=False).step_time_s
    # the replay runs every GPU at the mean speed: it compares with the step less its wait for the slowest
    assert s == pytest.approx(p.mean_gpu_step_time_s, rel=SIM_PREDICT_TOLERANCE), (s, p.mean_gpu_step_time_s)


@pytest.mark.parametrize("framework,plan", [
    ("torchtitan", "dp=8,zero=3"),     # FSDP2: gathers, reduce-scatters and copies per micro-batch
    ("megatron", "dp=8,zero=1"),       # distributed optimizer: bucketed reduce-scatter and gather per step
])
def test_sim_and_predict_agree_llama3_8b(framework, plan):
    """Llama 3 8B on 8 H100s, micro-batch 2 (16 micro-batches): before the copies were graph ops the
    replay left them out and ran 1.9% under predict on the torchtitan job."""
    _agree(make_training_job("llama3-8b", gpu="h100", num_gpus=8, plan=plan, micro_batch=2, framework=framework))


@pytest.mark.parametrize("plan,global_batch", [("dp=8,zero=3", 16), ("pp=2,dp=4,zero=3", 8)])
def test_chakra_and_perfetto_carry_the_copies(plan, global_batch):
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    from clustertwin.export.chakra import build_templates
    from clustertwin.export.perfetto import perfetto_trace
    job = _tiny(plan=plan, global_batch=global_batch)
    g = build_graph(job)
    pricer = Pricer(g)
    for i, t in enumerate(build_templates(g, pricer)):
        sg = g.stages[i]
        per_mb = _copies(sg.microbatch_dp_ops)
        want = (g.num_microbatches * sum(pricer.time(op) for op in per_mb.values())
                + sum(pricer.time(op) for op in _copies(sg.step_ops).values()))
        got = sum(n.duration_s for n in t.nodes if ".fsdp2." in n.name or n.name.startswith("fsdp2."))
        assert want > 0 and got == pytest.approx(want)
    events = [e for e in perfetto_trace(simulate(job, baseline=False))["traceEvents"] if "fsdp2." in e.get("name", "")]
    assert events and all(e["cat"] == "compute" and e["args"]["bytes"] > 0 for e in events)


def test_zero2_copies_out_in_the_forward_only():
    """torchtitan's ZeRO-2 is fully_shard(reshard_after_forward=False): each unit's forward all-gather is
    copied out and each reduce-scatter copied in, as at ZeRO-3, but the backward gathers nothing, so it
    copies nothing out (workload.graph.fsdp2_copies, regather False)."""
    ops = _copies(build_graph(_tiny(plan="dp=8,zero=2")).stages[0].microbatch_dp_ops)
    assert set(ops) == {"fsdp2.copy_out.fwd.dp_cp", "fsdp2.copy_in.dp_cp"}
