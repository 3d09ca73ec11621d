"""Calibration without a GPU: fitting and interpolation on recorded (SYNTHETIC) data, the profile file
round-trip, predict --profile, the no-GPU errors; the PyTorch model on CPU when torch is installed.

tests/data/calibrate_synthetic_raw.json is SYNTHETIC test data made from a formula: not a
measurement, not a shipped profile, not used for any accuracy claim.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustertwin import predict
from clustertwin.calibrate.fit import fit_profile
from clustertwin.calibrate.profile import (FLOOR, GridTable, load_profile, parse_profile, save_profile,
                                           shipped_profile_path)
from clustertwin.catalog import load_gpu, load_model
from clustertwin.cli import main
from clustertwin.calibrate.profile import profile_for
from clustertwin.errors import ClusterTwinError, DataError

RAW = Path(__file__).parent / "data" / "calibrate_synthetic_raw.json"
H100 = load_gpu("h100-sxm")


@pytest.fixture(scope="module")
def raw() -> dict:
    return json.loads(RAW.read_text())


@pytest.fixture(scope="module")
def prof(raw):
    return fit_profile(raw, H100, source="SYNTHETIC test fixture", synthetic=True)


@pytest.fixture(scope="module")
def prof_file(prof, tmp_path_factory) -> Path:
    return save_profile(prof, tmp_path_factory.mktemp("prof") / "h100.yaml")


# ---- fitting ----------------------------------------------------------------------------------
def test_fit_tables(prof):
    assert prof.synthetic and prof.gpu == "h100-sxm"
    assert {"gemm.bf16", "attention", "memory.copy", "memory.adamw", "launch", "nccl.all_reduce"} <= set(prof.measured)
    g = np.asarray(prof.gemm["bf16"]["tflops"])
    assert g.shape == (4, 4, 3)
    for d in range(3):  # monotone after cleanup, including the deliberately slow 16384^2 x 1024 point
        assert np.all(np.diff(g, axis=d) >= 0)
    assert g.max() <= H100.peak("bf16") / 1e12
    assert 0.5 < g.max() * 1e12 / H100.peak("bf16") < 0.8
    # nccl: all-reduce bus bandwidth = algbw * 2(n-1)/n, approaching the synthetic 360 GB/s
    assert 300 < prof.nccl["all_reduce"]["busbw_gbps"][-1] <= 360
    assert "nic" in prof.datasheet


def test_fit_rejects_bad_raw(raw):
    bad = {**raw, "gemm": [{"dtype": "bf16", "m": 1, "n": 1, "k": 1, "seconds": 0}]}
    with pytest.raises(DataError, match="seconds"):
        fit_profile(bad, H100)


# ---- interpolation ----------------------------------------------------------------------------
dims = st.floats(min_value=1, max_value=1e6, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(m=dims, n=dims, k=dims, which=st.integers(0, 2), factor=st.floats(1.0, 1e3))
def test_gemm_efficiency_monotone_and_bounded(prof, m, n, k, which, factor):
    t = prof.tables().gemm["bf16"]
    base = t(m, n, k)
    grown = [m, n, k]
    grown[which] *= factor
    assert t(*grown) >= base - 1e-12
    assert t.floor <= base <= t.asymptote <= 1.0


def test_grid_table_edges():
    t = GridTable([[10, 100, 1000]], [0.2, 0.1, 0.6])  # noisy middle point is lifted by the cumulative max
    assert t(100) == pytest.approx(0.2)
    assert t(1e9) == pytest.approx(0.6)  # clamped above the grid: never above the asymptote
    assert t(5) == pytest.approx(0.1)    # below the grid: no faster than at the edge
    assert t(1e-6) == FLOOR               # never below the floor
    assert t(10 ** 1.5) == pytest.approx(0.2)


# ---- the profile file -------------------------------------------------------------------------
def test_profile_round_trip(prof, prof_file, tmp_path):
    back = load_profile(prof_file)
    assert back.to_dict() == {**prof.to_dict()}
    js = save_profile(back, tmp_path / "p.json")
    assert load_profile(js).to_dict() == prof.to_dict()
    text = prof_file.read_text()
    assert "schema: clustertwin-profile" in text and "version: 1" in text and "synthetic: true" in text


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(schema="other"), "profile.schema"),
    (lambda d: d.update(version=99), "profile.version"),
    (lambda d: d["gemm"]["bf16"].update(m=[4096, 1024, 256, 16384]), "strictly increasing"),
    (lambda d: d["gemm"]["bf16"].update(tflops=[[1.0]]), "shape"),
    (lambda d: d["gemm"]["bf16"]["tflops"][0][0].__setitem__(0, 5000.0), "exceeds the datasheet peak"),
    (lambda d: d["memory"]["copy"].update(gbps=[-1, 1, 1, 1, 1]), "non-negative"),
])
def test_profile_validation_one_line(prof, mutate, match):
    d = json.loads(json.dumps(prof.to_dict()))
    mutate(d)
    with pytest.raises(DataError, match=match) as e:
        parse_profile(d)
    assert "\n" not in str(e.value)


def test_bad_profile_file_cli(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text("schema: clustertwin-profile\nversion: 7\n")
    assert main(["predict", "--profile", str(f), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: profile.version:") and "\n" not in err


# ---- pricing --------------------------------------------------------------------------------------
def test_no_profile_ships_yet_and_default_unchanged():
    assert shipped_profile_path("h100-sxm") is None
    assert profile_for(H100).tables is None


def test_predict_profile_changes_gemm_times(prof, prof_file, tmp_path):
    kw = dict(gpu="h100-sxm", num_gpus=8, plan="tp=1,pp=1,dp=8,zero=1", micro_batch=1, global_batch=8, seq_len=4096)
    base = predict("llama3-8b", **kw)
    meas = predict("llama3-8b", profile=prof_file, **kw)
    assert meas.step_time_s != base.step_time_s
    # a profile whose GEMMs run at half the throughput makes compute slower
    d = prof.to_dict()
    d["gemm"]["bf16"]["tflops"] = (np.asarray(d["gemm"]["bf16"]["tflops"]) / 2).tolist()
    slow = save_profile(parse_profile(d), tmp_path / "slow.yaml")
    slower = predict("llama3-8b", profile=slow, **kw)
    assert slower.breakdown_s["compute"] > meas.breakdown_s["compute"] * 1.3
    # and a faster one (GEMMs at the datasheet peak) makes it faster than the defaults
    d["gemm"]["bf16"]["tflops"] = np.full((4, 4, 3), H100.peak("bf16") / 1e12).tolist()
    fast = predict("llama3-8b", profile=save_profile(parse_profile(d), tmp_path / "fast.yaml"), **kw)
    assert fast.breakdown_s["compute"] < base.breakdown_s["compute"]


def test_predict_profile_cli_and_gpu_mismatch(prof_file, capsys):
    assert main(["predict", "--gpu", "h100-sxm", "-n", "8", "--plan", "tp=1,dp=8", "--global-batch", "8",
                 "--profile", str(prof_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] > 0
    assert main(["predict", "--gpu", "a100-80gb", "-n", "8", "--plan", "tp=1,dp=8", "--global-batch", "8",
                 "--profile", str(prof_file)]) == 2
    assert "error: profile: measured on h100-sxm, but the job runs on a100-80gb" in capsys.readouterr().err


# ---- GPU commands without a GPU ---------------------------------------------------------------
def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.skipif(_has_cuda(), reason="a CUDA GPU is visible")
@pytest.mark.parametrize("args", [["calibrate", "--quick"],
                                  ["measure", "-m", "llama3-8b", "--micro-batch", "1", "--seq-len", "128"]])
def test_gpu_commands_without_gpu(args, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (f"error: gpu: no CUDA GPU visible to PyTorch; run {args[0]} on a machine with an NVIDIA GPU "
                   "(pip install 'clustertwin[gpu]')\n")


# ---- measure: rows and the PyTorch model ------------------------------------------------------
def test_measure_rows_validate(tmp_path):
    from clustertwin.calibrate.measure import Measurement, append_rows, rows_for, truncate
    from clustertwin.validate import read_runs, validate_rows
    spec = truncate(load_model("llama3-8b"), 4)
    assert spec.num_layers == 4 and spec.params_total < load_model("llama3-8b").params_total
    m = Measurement(spec, "h100-sxm", 1, 2048, "pytorch-eager", "none", [0.21, 0.2, 0.22], 30 * 2**30,
                    "SYNTHETIC", "x", "y", "z", "2000-01-01")
    f = tmp_path / "runs.csv"
    append_rows(f, rows_for(m))
    append_rows(f, rows_for(m, run_id="again"))
    rows = list(csv.DictReader(f.open()))
    assert len(rows) == 4 and rows[0]["arch"] == "llama" and rows[0]["value"] == "0.21"
    rep = validate_rows(read_runs(f))
    assert len(rep.ok_rows) == 4


def test_measure_rejects_moe():
    from clustertwin.calibrate.measure import arch_of
    from clustertwin.catalog import list_presets
    moe = next(r["name"] for r in list_presets("models") if r["moe_experts"])
    with pytest.raises(ClusterTwinError, match="mixture-of-experts"):
        arch_of(load_model(moe))


@pytest.mark.parametrize("style", ["gpt", "llama"])
def test_torch_model_matches_spec(style):
    torch = pytest.importorskip("torch")
    from clustertwin.calibrate.torch_model import build_model, count_params
    from clustertwin.specs import ModelSpec
    common = dict(num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=128, vocab_size=97, max_seq_len=32)
    if style == "gpt":
        spec = ModelSpec(name="tiny-gpt", activation="gelu", norm="layernorm", positions="learned", bias=True, **common)
    else:
        spec = ModelSpec(name="tiny-llama", activation="swiglu", norm="rmsnorm", positions="rope", bias=False,
                         num_kv_heads=2, **common)
    torch.manual_seed(0)
    model = build_model(spec, recompute="full")
    assert count_params(model) == spec.params_total
    tokens = torch.randint(0, spec.vocab_size, (2, 17))
    logits = model(tokens[:, :-1])
    assert logits.shape == (2, 16, spec.vocab_size)
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, spec.vocab_size), tokens[:, 1:].reshape(-1))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    assert abs(loss.item() - np.log(spec.vocab_size)) < 1.0
