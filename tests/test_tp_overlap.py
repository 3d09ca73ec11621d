"""TP communication overlap (userbuffers): a collective split into tp chunks and pipelined with its GEMM
exposes its first chunk, and beyond it whatever it outlasts the GEMM."""
from __future__ import annotations

import pytest

from clustertwin import make_training_job, predict_job
from clustertwin.schedule.step import tp_overlap_excess


def test_excess_by_hand() -> None:
    assert tp_overlap_excess(112e-6, 72e-6, 8) == pytest.approx(7 / 8 * 40e-6)   # outlasts by 40 us
    assert tp_overlap_excess(50e-6, 72e-6, 8) == 0.0                             # hidden
    assert tp_overlap_excess(112e-6, 72e-6, 1) == 0.0                            # no chunks: no overlap


def _job(model: str, overlap: bool):
    return make_training_job(model, gpu="h100", num_gpus=8, plan=f"tp=8,sp=1,overlap_tp_comm={int(overlap)}",
                             micro_batch=1, global_batch=8, seq_len=4096)


def test_small_gemms_expose_more_than_the_first_chunk() -> None:
    """Llama 3 8B at tp=8: its QKV and output-projection GEMMs are shorter than the collectives beside
    them, so overlapped TP exposes more than 1/tp of the communication, and still less than all of it."""
    on = predict_job(_job("llama3-8b", True)).breakdown_s["tp_comm"]
    off = predict_job(_job("llama3-8b", False)).breakdown_s["tp_comm"]
    assert off / 8 < on < off


def test_overlap_never_costs_more_than_no_overlap_in_communication() -> None:
    for model in ("gpt3-13b", "llama3-8b"):
        on = predict_job(_job(model, True)).breakdown_s["tp_comm"]
        off = predict_job(_job(model, False)).breakdown_s["tp_comm"]
        assert on <= off
