"""FSDP2 does not reshard the root module after the forward (torch/distributed/fsdp/_fully_shard/
_fsdp_state.py, FSDPState._lazy_init clears the root's post_forward_mesh_info), and torchtitan's root
holds the embedding, final norm and head: the root is gathered once per micro-batch, each layer unit
twice (forward and backward), in the workload graph's ops, the replay and the memory model alike."""
from __future__ import annotations

from collections import Counter

import pytest

from clustertwin.sim.replay import simulate
from clustertwin.workload.graph import build_graph

from test_fsdp2_copies import TINY_PARAMS, TINY_ROOT, _tiny


def test_graph_gathers_the_root_in_the_forward_only():
    """2 layers + the root, bf16: the forward gathers every parameter (2 bytes each), the backward the
    two layers only; the reduce-scatter takes every gradient (fp32 under torchtitan)."""
    ops = {op.name: op for op in build_graph(_tiny()).stages[0].microbatch_dp_ops if op.is_comm}
    assert ops["fsdp.param_all_gather.fwd.dp_cp"].comm_bytes == TINY_PARAMS * 2
    assert ops["fsdp.param_all_gather.bwd.dp_cp"].comm_bytes == (TINY_PARAMS - TINY_ROOT) * 2
    assert ops["fsdp.grad_reduce_scatter.dp_cp"].comm_bytes == TINY_PARAMS * 4


def test_replay_gathers_root_once_and_each_layer_twice_per_microbatch():
    """dp=8, 16 sequences of micro-batch 1: 2 micro-batches on each rank. Per micro-batch the root's
    segments (embedding, head) are gathered once (in the forward), each layer twice."""
    r = simulate(_tiny(), baseline=False)
    gathers = Counter((t.microbatch, t.name.split()[-1]) for t in r.ranks[0].tasks
                      if t.op is not None and t.op.collective == "all_gather")
    assert set(mb for mb, _ in gathers) == {0, 1}
    for mb in (0, 1):
        assert gathers[(mb, "embedding")] == gathers[(mb, "head")] == 1
        assert gathers[(mb, "L0")] == gathers[(mb, "L1")] == 2
    # and the bytes the backward's gathers move are the layers' alone
    bwd = [t for t in r.ranks[0].tasks if t.op is not None and t.op.name == "fsdp.param_all_gather.bwd.dp_cp"
           and t.microbatch == 0]
    assert sum(t.fraction for t in bwd) == pytest.approx(1.0)
    assert {t.name.split()[-1] for t in bwd} == {"L0", "L1"}


def test_memory_holds_the_root_gathered_beside_two_layer_units():
    """FSDP at dp=8: the root's gathered 16-bit copy (embedding + head, 1000 parameters) lives from the
    forward to the end of the backward, beside the layer unit in use and the one prefetched (10 layers
    of 100): 2 x (1000 + 2 x 100) bytes, whatever the root's size against a layer."""
    from clustertwin.schedule.memory import stage_memory
    from clustertwin.specs.framework import get_framework
    fw = get_framework("torchtitan")

    for emb in (1000.0, 50.0, 0.0):
        m = stage_memory(fw, "bf16", 3, dense=1000.0 + emb, expert=0.0, dp_cp=8, edp=1, layers_dense=10,
                         layers_moe=0, act_dense=0.0, act_moe=0.0, act_full_layer=0.0, in_flight_layers=0,
                         embedding=emb)
        churn = 0.0 if fw.contiguous_param_grad_buffers else fw.allocator_overhead * (m["weights"] + m["gradients"])
        assert m["other"] - fw.base_memory_bytes - churn == pytest.approx(2 * (emb + 2 * 100))


def test_deepspeed_zero3_still_regathers_every_unit():
    """DeepSpeed's ZeRO-3 is not FSDP2: its backward gathers as much as its forward (fsdp_keeps_root)."""
    ops = {op.name: op for op in build_graph(_tiny(framework="deepspeed-zero3@2021")).stages[0].microbatch_dp_ops
           if op.is_comm}
    assert ops["fsdp.param_all_gather.bwd.dp_cp"].comm_bytes == ops["fsdp.param_all_gather.fwd.dp_cp"].comm_bytes
