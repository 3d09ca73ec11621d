"""The interleaved pipeline's sends on the critical path and the Llama 3 paper's flexible schedule (issue 16).

- Megatron's depth-first interleaved schedule (N = p contiguous micro-batches per chunk) has no slack
  around the ring of stages: the first micro-batch's forward and the last one's backward cross all
  p v - 1 chunk boundaries, so 2 (p v - 1) sends sit on the critical path, not 1F1B's 2 (p - 1).
  Larger groups (N > p) hide N - p chunk passes of each wrap's sends.
- The Llama 3 paper's schedule (arXiv 2407.21783 Sec. 3.3.2, Fig. 6: "allows setting N flexibly ...
  can run an arbitrary number of micro-batches in each batch"): the meta-llama3 stack runs any number
  of micro-batches with vpp > 1; with fewer micro-batches than stages each wrap idles p - m passes more.
The analytic model and the discrete-event replay (which knows nothing of these formulas, only the
orders and the dependencies) agree.
"""
from __future__ import annotations

import pytest

import clustertwin as ct
from clustertwin.cli import main
from clustertwin.errors import ClusterTwinError
from clustertwin.predict import make_training_job
from clustertwin.schedule.step import fill_drain_sends, interleaved_bubble_slots, ring_wrap_sends
from clustertwin.sim.replay import simulate
from clustertwin.schedule.groups import microbatch_group
from clustertwin.sim.schedule import stage_order

SMALL = dict(gpu="h100-sxm", num_gpus=64, seq_len=4096, micro_batch=1, plan="tp=4,pp=4,vpp=2,dp=4,sp=1,zero=2")


def test_depth_first_schedule_exposes_every_chunk_boundary_send() -> None:
    """N = p: each of the v - 1 wraps, forward and backward, waits for all p of the ring's sends."""
    assert fill_drain_sends(16, 16, 8) + ring_wrap_sends(16, 16, 8, 1e-3, 0.01) == pytest.approx(2 * (16 * 8 - 1))
    assert fill_drain_sends(32, 16, 8) + ring_wrap_sends(32, 16, 8, 1e-3, 0.01) == pytest.approx(254)


def test_larger_groups_hide_the_wrap_sends() -> None:
    """N = 20 > p = 16: 4 passes of slack per wrap; hidden whole once they outlast the p sends."""
    assert microbatch_group(16, 20) == 20
    assert ring_wrap_sends(20, 16, 8, 1.0, 0.1) == pytest.approx(2 * 7 * (16 - 4 * 0.1))
    assert ring_wrap_sends(20, 16, 8, 1.0, 10.0) == 0.0
    assert ring_wrap_sends(20, 16, 1, 1.0, 0.0) == 0.0        # no interleaving, no wraps


def test_bubble_with_fewer_microbatches_than_stages() -> None:
    assert interleaved_bubble_slots(16, 16, 8) == 15
    assert interleaved_bubble_slots(40, 16, 8) == 15
    assert interleaved_bubble_slots(8, 16, 8) == 15 + 7 * 8
    assert interleaved_bubble_slots(8, 16, 1) == 15


def test_llama3_405b_fill_and_drain_cross_127_chunk_boundaries() -> None:
    """The documented plan (PP 16, V 8, 16 micro-batches): 254 sends of one chunk boundary's
    activations (1/8 of 8,192 x 16,384 bf16 values per TP rank over its NIC) on the critical path."""
    pred = ct.predict("llama3.1-405b", gpu="h100-sxm", num_gpus=16384, seq_len=8192, global_batch=2048,
                      micro_batch=1, plan="tp=8,pp=16,vpp=8,dp=128,sp=1,zero=2,first=0,last=0",
                      framework="meta-llama3")
    crit = next(s for s in pred.step.stages if s.stage == pred.step.critical_stage)
    assert pred.breakdown_s["pp_comm"] == pytest.approx(254 * crit.pp_s / 16)


@pytest.mark.parametrize("m", [2, 3, 4, 6, 8, 10])
def test_flexible_schedule_replay_agrees_with_predict(m: int) -> None:
    """pp 4, vpp 2 with 2-10 micro-batches (fewer than, a multiple of, and neither): the replay of the
    schedule's orders and the analytic step agree within 2%."""
    kw = dict(SMALL, global_batch=4 * m, framework="meta-llama3")
    pred = ct.predict("llama3.1-8b", **kw)
    sim = simulate(make_training_job("llama3.1-8b", **kw))
    assert sim.step_time_s == pytest.approx(pred.mean_gpu_step_time_s, rel=0.02)


@pytest.mark.parametrize("p,v,m", [(4, 2, 6), (4, 2, 3), (4, 3, 11), (16, 8, 20), (16, 8, 8)])
def test_flexible_orders_run_every_pass_once(p: int, v: int, m: int) -> None:
    """Each stage runs every chunk's forward and backward of every micro-batch exactly once, a
    micro-batch's chunk forwards in order and its chunk backwards in reverse."""
    for stage in range(p):
        order = stage_order(p, v, m, stage)
        assert sorted(order) == sorted((ph, c, k) for ph in "FB" for c in range(v) for k in range(m))
        for k in range(m):
            assert [c for ph, c, i in order if ph == "F" and i == k] == list(range(v))
            assert [c for ph, c, i in order if ph == "B" and i == k] == list(range(v - 1, -1, -1))


def test_megatron_still_needs_a_multiple_of_pp(capsys) -> None:
    """Megatron-Core's default group (N = pp) needs micro-batches in multiples of pp: a one-line refusal."""
    with pytest.raises(ClusterTwinError):
        ct.predict("llama3.1-8b", global_batch=24, framework="megatron", **SMALL)
    code = main(["predict", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "64", "--seq-len", "4096",
                 "--global-batch", "24", "--micro-batch", "1", "--plan", SMALL["plan"], "--framework", "megatron"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "global_batch" in err and "Traceback" not in err
    assert ct.predict("llama3.1-8b", global_batch=24, framework="meta-llama3", **SMALL).step_time_s > 0
