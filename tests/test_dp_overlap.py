"""Data-parallel overlap as Megatron-Core (core_r0.8.0) schedules it: the first pipeline stage hides
its bucketed reduce-scatter under its last backward, later stages reduce after their backward, behind
the pipeline's drain; the DDP wrapper's passes over the gradient buffer."""
import pytest

from clustertwin.constants import value
from clustertwin.schedule.step import OVERLAP_SLOWDOWN, StageTime, bucket_elements, compose_step
from clustertwin.specs.framework import get_framework
from clustertwin.workload.graph import optimizer_traffic

P = 1e9   # parameters per stage: 25 buckets of 40M at dp 8


def _stages(p, sync, gather=0.0, fwd=1.0, bwd=2.0):
    return [StageTime(i, fwd_s=fwd, bwd_s=bwd, dp_sync_s=sync[i], param_gather_s=gather) for i in range(p)]


def _dp(stages, p=None, v=1, m=8, dp=8, odp=True, opg=False):
    p = p or len(stages)
    bd, _ = compose_step(stages, list(range(p)), [P] * p, m, p, v, False, odp, opg, dp)
    return bd["dp_comm"]


def test_first_stage_hides_all_but_what_outlasts_its_last_backward():
    # one stage: 5 s of reduction, 2 s of last backward: 3 s exposed, 2 s hidden (and slowing it)
    assert _dp(_stages(1, [5.0])) == pytest.approx(3.0 + OVERLAP_SLOWDOWN * 2.0)
    # a short reduction: only the last bucket (40M of 1e9 parameters) is left in the open
    short = 1.0
    last = value("schedule.dp_bucket_elements") / P * short
    assert _dp(_stages(1, [short])) == pytest.approx(last + OVERLAP_SLOWDOWN * (short - last))


def test_a_later_stage_reduces_behind_the_drain_not_its_own_backward():
    # stage 1 of 2 ends one backward slot (2 s) before stage 0; its 4.5 s reduction starts then and
    # is not hidden by its own backward: 2.5 s past the end of stage 0 (which exposes only its last bucket)
    sync = [0.1, 4.5]
    assert _dp(_stages(2, sync)) == pytest.approx(2.5)
    # stage 3 of 4 has three slots of drain: a reduction shorter than 6 s is hidden entirely
    assert _dp(_stages(4, [0.0, 0.0, 0.0, 5.9])) == pytest.approx(0.0)


def test_a_later_stage_gathers_behind_the_fill():
    # one all-gather per later stage, waited for at its first forward, s forward slots (1 s each) in
    stages = _stages(3, [0.0] * 3)
    stages[2].param_gather_s = 2.5
    assert _dp(stages, odp=True, opg=True) == pytest.approx(0.5)


def test_bucket_grows_with_dp():
    assert bucket_elements(8) == value("schedule.dp_bucket_elements")
    assert bucket_elements(1000) == pytest.approx(1000 * value("schedule.dp_bucket_elements_per_dp_rank"))
    # a larger last bucket leaves more in the open
    assert _dp(_stages(1, [1.0]), dp=1000) > _dp(_stages(1, [1.0]), dp=8)


def test_more_backward_never_exposes_more():
    for p in (1, 2, 4):
        short = _dp(_stages(p, [3.0] * p, bwd=1.0))
        long = _dp(_stages(p, [3.0] * p, bwd=3.0))
        assert long <= short + 1e-12


def test_megatron_core_passes_over_the_gradient_buffer():
    fw = get_framework("megatron-core@2024")
    assert fw.grad_buffer_checks == ("nan_check", "scale")
    dense = 1e9
    _, plain = optimizer_traffic(dense, 0.0, 8, 1, 1, 2)
    _, checked = optimizer_traffic(dense, 0.0, 8, 1, 1, 2, fw.grad_buffer_checks, 4)
    assert checked - plain == pytest.approx(dense * 4 * 3)       # a norm read, a scale read and write
    _, one_rank = optimizer_traffic(dense, 0.0, 1, 1, 1, 2, fw.grad_buffer_checks, 4)
    _, one_plain = optimizer_traffic(dense, 0.0, 1, 1, 1, 2)
    assert one_rank - one_plain == pytest.approx(dense * 4)       # dp 1: nothing to average
    assert get_framework("megatron-lm@2021").grad_buffer_checks == ()


def test_the_gradient_buffer_is_zeroed_in_its_own_dtype() -> None:
    """Zeroing writes the whole buffer (ZeRO-1: every parameter) once at its element size: a 16-bit
    buffer (grad_reduce_dtype bf16) writes half of an fp32 one; the rest of the step is the same."""
    dense, expert = 1e9, 2e8
    _, fp32 = optimizer_traffic(dense, expert, 8, 2, 1, 2, grad_bytes=4)
    _, bf16 = optimizer_traffic(dense, expert, 8, 2, 1, 2, grad_bytes=2)
    assert fp32 - bf16 == pytest.approx(2 * (dense + expert))
    # ZeRO-2 keeps only the shard's gradients: only those are zeroed
    _, z2_fp32 = optimizer_traffic(dense, expert, 8, 2, 2, 2, grad_bytes=4)
    _, z2_bf16 = optimizer_traffic(dense, expert, 8, 2, 2, 2, grad_bytes=2)
    assert z2_fp32 - z2_bf16 == pytest.approx(2 * (dense / 8 + expert / 2))
