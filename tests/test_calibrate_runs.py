"""calibrate --from-runs and validate --cv source: the fit recovers parameters from rows the model itself
made with a perturbed profile, respects its bounds, never trains on the held-out source, and bad input
is one line. Every "measured" row here is SYNTHETIC (made by the model), never a measurement."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from clustertwin.calibrate import bands
from clustertwin.calibrate.profile import load_profile, parse_profile, save_profile
from clustertwin.calibrate.runs import (FitParam, FitRow, apply_params, candidate_params, cross_validate_fit,
                                        fit_runs, fit_to_profile, predict_rows, source_group)
from clustertwin.catalog import load_gpu
from clustertwin.cli import main
from clustertwin.cost.profile import default_profile
from clustertwin.errors import DataError
from clustertwin.jobs import make_training_job
from clustertwin.predict import predict_job
from clustertwin.specs.framework import get_framework

H100 = load_gpu("h100-sxm")
BASE = default_profile                   # the architecture defaults: independent of shipped profiles
PLANS = [  # (plan, GPUs, global batch): compute-bound, TP-heavy, multi-node DP
    ("tp=1,pp=1,dp=8,zero=1", 8, 16), ("tp=2,pp=1,dp=4,sp=1,zero=1", 8, 16), ("tp=4,pp=1,dp=2,sp=1,zero=1", 8, 8),
    ("tp=8,pp=1,dp=1,sp=1,zero=1", 8, 8), ("tp=1,pp=1,dp=16,zero=1", 16, 32), ("tp=2,pp=2,dp=8,sp=1,zero=1", 32, 64),
]


def _job(plan: str, n: int, gb: int, seq: int = 4096, framework: str = "megatron"):
    return make_training_job("llama3-8b", gpu="h100-sxm", num_gpus=n, plan=plan, micro_batch=1, global_batch=gb,
                             seq_len=seq, framework=framework)


def _param(field: str, lo: float = 0.2, hi: float = 1.0, scope: str = "hopper", kind: str = "hardware"):
    if kind == "hardware":
        v = BASE(H100).gemm_efficiency["bf16"] if field == "gemm_efficiency.bf16" else getattr(BASE(H100), field)
    else:
        v = getattr(get_framework(scope), field)
    return FitParam(f"{scope}.{field}", kind, scope, field, v, lo, hi)


def _synthetic_rows(truth: list[FitParam], values: list[float], groups=("a", "b", "c")) -> list[FitRow]:
    """Rows 'measured' by the model itself under the profile with ``truth`` set to ``values``."""
    rows = []
    for i, (plan, n, gb) in enumerate(PLANS):
        job = _job(plan, n, gb)
        t = predict_job(job, apply_params(BASE(H100), truth, values)).step_time_s
        rows.append(FitRow(f"r{i}", groups[i % len(groups)], job, t))
    return rows


@pytest.fixture(scope="module")
def gemm_mem():
    return [_param("gemm_efficiency.bf16"), _param("memory_efficiency", 0.3, 1.0)]


def test_fit_recovers_perturbed_parameters(gemm_mem):
    # the truth: GEMMs at 0.60 of peak instead of 0.72, HBM at 0.75 instead of 0.88
    rows = _synthetic_rows(gemm_mem, [0.60, 0.75])
    fit = fit_runs(rows, BASE, params=gemm_mem, prior_sigma=None)   # no prior: the data alone
    got = {p.param.field: p.value for p in fit.params}
    assert got["gemm_efficiency.bf16"] == pytest.approx(0.60, rel=1e-3)
    assert got["memory_efficiency"] == pytest.approx(0.75, rel=1e-3)
    assert fit.mape < 1e-4                        # the rows are the model's own: nothing left to explain
    assert all(p.sd < 1e-3 for p in fit.params)
    # the shipped profile misses these rows by more than 5%
    pred = predict_rows(None, rows, BASE)
    assert min(abs(p / r.measured_step_s - 1) for p, r in zip(pred, rows)) > 0.05


def test_the_prior_holds_what_the_rows_barely_see(gemm_mem):
    # HBM efficiency moves these compute-bound steps by well under 1%: with the default prior the fit
    # explains the rows mostly with the GEMM efficiency and keeps HBM near its shipped 0.88
    rows = _synthetic_rows(gemm_mem, [0.60, 0.75])
    fit = fit_runs(rows, BASE, params=gemm_mem)
    got = {p.param.field: p.value for p in fit.params}
    assert got["gemm_efficiency.bf16"] == pytest.approx(0.60, rel=0.03)
    assert abs(got["memory_efficiency"] - 0.88) < abs(got["memory_efficiency"] - 0.75)
    assert fit.mape < 0.005


def test_fit_at_the_defaults_stays_there(gemm_mem):
    rows = _synthetic_rows(gemm_mem, [p.default for p in gemm_mem])
    fit = fit_runs(rows, BASE, params=gemm_mem)
    for p in fit.params:
        assert p.value == pytest.approx(p.param.default, rel=1e-3)


def test_bounds_respected(gemm_mem):
    # measured 3x slower than the model: the GEMM efficiency would have to fall to ~0.24; bound it at 0.5
    rows = [replace(r, measured_step_s=3 * r.measured_step_s) for r in _synthetic_rows(gemm_mem, [0.72, 0.88])]
    p = replace(gemm_mem[0], lo=0.5)
    fit = fit_runs(rows, BASE, params=[p])
    (res,) = fit.params
    assert res.value == pytest.approx(0.5) and res.at_bound
    assert all(q.param.lo <= q.value <= q.param.hi for q in fit.params)


def test_framework_parameter_goes_through_the_profile():
    # the launch floor is a FrameworkProfile field: the fit sets it in HardwareProfile.framework_params
    p = _param("cpu_dispatch_s", 1e-6, 1e-4, scope="megatron", kind="framework")
    prof = apply_params(BASE(H100), [p], [5e-5])
    assert prof.framework_params == {"megatron": {"cpu_dispatch_s": 5e-5}}
    assert prof.framework(get_framework("megatron")).cpu_dispatch_s == 5e-5
    assert prof.framework(get_framework("nemo")).cpu_dispatch_s == get_framework("nemo").cpu_dispatch_s
    job = _job("tp=8,pp=1,dp=1,sp=1,zero=1", 8, 8, seq=1024)
    assert predict_job(job, prof).step_time_s > predict_job(job, BASE(H100)).step_time_s


def test_candidates_are_the_profiles_named_fields():
    rows = _synthetic_rows([], [])
    names = [c.name for c in candidate_params(rows, BASE)]
    assert "hopper.gemm_efficiency.bf16" in names and "megatron.cpu_dispatch_s" in names
    assert "hopper.nic_efficiency" in names and len(names) == len(set(names))
    fit = fit_runs(rows, BASE)                    # automatic selection: at most 12, each within bounds
    assert len(fit.params) <= 12
    assert all(p.param.lo <= p.value <= p.param.hi for p in fit.params)


def test_cv_never_trains_on_the_held_out_source(gemm_mem):
    rows = _synthetic_rows(gemm_mem, [0.65, 0.8])
    seen = []
    folds = cross_validate_fit(rows, BASE, on_fold=lambda held, trained: seen.append((held, trained)),
                               params=gemm_mem)
    assert [f.group for f in folds] == ["a", "b", "c"]
    for held, trained in seen:
        assert held not in trained and trained
    assert all(f.mape < 0.01 for f in folds)      # the same truth everywhere: out of sample is as good


HEADER = ("run_id,source,source_url,model,arch,layers,hidden,heads,kv_heads,ffn_hidden,vocab,seq_len,moe_experts,"
          "moe_topk,gpu,num_gpus,gpus_per_node,tp,pp,vpp,dp,cp,ep,sp,zero_stage,recompute,micro_batch,global_batch,"
          "precision,framework,metric,value,notes\n")


def _csv(tmp_path, rows: list[tuple[str, str, int, int, float]], name="runs.csv", metric="iteration_time_s") -> Path:
    lines = [f"{rid},\"{src}, Table 1\",,m,llama,8,2048,16,8,5632,32000,2048,,,h100-sxm,8,8,{tp},1,,,1,1,"
             f"{int(tp > 1)},1,none,1,{gb},bf16,megatron,{metric},{v},SYNTHETIC" for rid, src, tp, gb, v in rows]
    p = tmp_path / name
    p.write_text(HEADER + "\n".join(lines) + "\n")
    return p


def test_validate_cv_source_cli(tmp_path, capsys):
    rows = [(f"r{i}", f"Source {'ABC'[i % 3]}", (1, 2, 4)[i % 3] if i < 3 else (2, 4, 1)[i % 3], 8 * (1 + i % 2),
             0.5 + 0.1 * i) for i in range(6)]
    f = _csv(tmp_path, rows)
    assert main(["validate", str(f), "--cv", "source", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cv"] == "source" and out["n"] == 6 and out["n_predicted"] == 6
    assert {g["source"] for g in out["folds"]} == {"Source A", "Source B", "Source C"}
    # the other two sources' rows: fitted, or screened out of the fit as outliers (the synthetic
    # measurements are far from the model, so the screen may drop one)
    assert all(g["n_train"] + g["n_screened"] == 4 and g["n_train"] >= 3 for g in out["folds"])
    assert set(out["by_file"]) == {"runs.csv"} and out["mape"] > 0
    assert main(["validate", str(f), "--cv", "source"]) == 0
    assert "leave-one-source-out" in capsys.readouterr().out


def test_validate_cv_hook_sees_no_held_out_rows(tmp_path):
    from clustertwin.validate import read_runs
    from clustertwin.validate.compare import cross_validate
    rows = read_runs(_csv(tmp_path, [(f"r{i}", f"S{i % 2}", 1 + i % 2, 8, 0.5 + 0.1 * i) for i in range(4)]))
    seen = []
    cv = cross_validate(rows, on_fold=lambda g, trained: seen.append((g, trained)))
    assert len(seen) == 2 and all(g not in trained for g, trained in seen)
    assert len(cv.report.rows) == 4


def test_from_runs_writes_a_profile_predict_uses(tmp_path, capsys):
    gm = [_param("gemm_efficiency.bf16")]
    rows = _synthetic_rows(gm, [0.6])
    fit = fit_runs(rows, BASE, params=gm)
    prof = fit_to_profile(fit, H100, ["synthetic.csv"])
    path = save_profile(prof, tmp_path / "fit.yaml")
    loaded = load_profile(path)
    assert loaded.fitted["hardware"]["gemm_efficiency.bf16"] == pytest.approx(0.6, rel=0.01)
    assert "version: 2" in path.read_text()
    hp = loaded.to_hardware_profile(load_gpu("h800"))          # fitted scalars hold for any Hopper GPU
    assert hp.gemm_efficiency["bf16"] == pytest.approx(0.6, rel=0.01) and "fitted" in hp.measured
    assert main(["predict", "--gpu", "a100-80gb", "-n", "8", "--plan", "tp=1,dp=8", "--global-batch", "8",
                 "--profile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: profile: fitted on hopper") and "\n" not in err


def test_calibrate_from_runs_cli(tmp_path, capsys):
    rows = [(f"r{i}", f"Source {'AB'[i % 2]}", (1, 2, 4, 8)[i % 4], 8, 0.4 + 0.15 * i) for i in range(4)]
    f = _csv(tmp_path, rows)
    out = tmp_path / "p.yaml"
    assert main(["calibrate", "--from-runs", str(f), "--out", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["n_runs"] == 4 and d["cv"] == "k-fold over rows" and d["cv_mape"] is not None
    assert all(p["bounds"][0] <= p["value"] <= p["bounds"][1] for p in d["parameters"])
    assert len(d["parameters"]) <= 12 and out.is_file()
    assert d["noise_scale"] >= 0.05 and d["n_rows"] + len(d["excluded"]) == d["n_runs"]   # every run fitted or said why
    assert all(set(e) == {"run_id", "source", "reason"} and "robust sd" in e["reason"] for e in d["excluded"])
    assert main(["predict", "--profile", str(out), "--json"]) == 0


@pytest.mark.parametrize("args,start", [
    (["calibrate", "--from-runs"], "error: from-runs: no CSV"),
    (["calibrate", "x.csv"], "error: calibrate: CSV files given without --from-runs"),
    (["calibrate", "--from-runs", "missing.csv"], "error: file:"),
    (["validate", "RUNS", "--cv", "run"], "error: cv: unknown grouping"),
    (["calibrate", "--from-runs", "MEM"], "error: from-runs: no row with a step time"),
])
def test_bad_inputs_one_line(tmp_path, capsys, args, start):
    runs = _csv(tmp_path, [("r0", "S", 1, 8, 0.5)])
    mem = _csv(tmp_path, [("r0", "S", 1, 8, 4e10)], "mem.csv", metric="peak_memory_bytes")
    args = [str(runs) if a == "RUNS" else str(mem) if a == "MEM" else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(start) and "\n" not in err


@pytest.mark.parametrize("fitted,match", [
    ({"hardware": {"memory_efficiency": 1.5}}, "profile.fitted.hardware.memory_efficiency"),
    ({"hardware": {"warp_speed": 0.5}}, "not a scalar HardwareProfile field"),
    ({"framework": {"megatron": {"cpu_dispatch_s": "fast"}}}, "not a number"),
    ({"framework": {"megatron": {"no_such_field": 1.0}}}, "not a FrameworkProfile field"),
])
def test_bad_fitted_section_one_line(fitted, match):
    d = {"schema": "clustertwin-profile", "version": 2, "gpu": "h100-sxm", "fitted": fitted}
    with pytest.raises(DataError, match=match) as e:
        parse_profile(d)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("source,group", [
    ("Narayanan et al. SC21 (Megatron-LM), Table 1", "Narayanan et al. SC21"),
    ("vTrain (VIA Research, KAIST; Bang et al., MICRO 2024) data/ground_truth_single.csv data row 7", "vTrain"),
    ("pytorch/torchtitan docs/performance.md (Llama 3.1 on Grand Teton H100)", "pytorch/torchtitan docs/performance.md"),
    ("", "(no source)"),
])
def test_source_group(source, group):
    assert source_group(source) == group


def test_expected_error_band_or_none(monkeypatch):
    table = bands.build_table([(("megatron", "hopper", "<=8"), e) for e in (-0.1, -0.05, 0.02, 0.04)] +
                              [(("nemo", "hopper", "<=8"), 0.1)], "SYNTHETIC")
    monkeypatch.setattr(bands, "_table", lambda: {(c["framework"], c["gpu_generation"], c["scale"]): c
                                                  for c in table["classes"]})
    e = bands.expected_error("megatron", H100, 8)
    assert e["band"] == [-0.1, 0.04] and e["n_runs"] == 4 and "leave-one-source-out" in e["basis"]
    none = bands.expected_error("nemo", H100, 8)            # one run: no band, said so
    assert none["band"] is None and none["basis"].startswith("no comparable measured runs")
    assert bands.expected_error("torchtitan", H100, 4096)["band"] is None
    pred = predict_job(_job("tp=1,pp=1,dp=8,zero=1", 8, 16))
    assert pred.to_json()["expected_error"] == e


def test_noise_scale_is_the_robust_sd_about_the_architecture_median():
    from clustertwin.calibrate.runs import F_SCALE, MAD_TO_SD, noise_scale
    rows = _synthetic_rows([], [])
    r = np.array([0.0, 0.2, -0.2, 0.1, -0.1, 0.0]) + 0.3     # one architecture, weights 1: median 0.3
    s, dev = noise_scale(rows, r)
    assert dev == pytest.approx(r - 0.3)
    assert s == pytest.approx(MAD_TO_SD * 0.1)                # median |deviation| is 0.1
    assert noise_scale(rows, np.full(6, -0.4))[0] == F_SCALE  # no spread: the floor


def test_a_row_the_model_cannot_price_is_screened_out_with_its_reason(gemm_mem):
    rows = _synthetic_rows(gemm_mem, [0.60, 0.88])
    odd = replace(rows[3], measured_step_s=3 * rows[3].measured_step_s)   # an effect no parameter describes
    rows = rows[:3] + [odd] + rows[4:]
    fit = fit_runs(rows, BASE, params=gemm_mem[:1], prior_sigma=None)
    assert [r.run_id for r, _ in fit.excluded] == ["r3"]
    assert "robust sd" in fit.excluded[0][1] and "hopper" in fit.excluded[0][1]
    assert "r3" not in {r.run_id for r in fit.rows}
    assert fit.params[0].value == pytest.approx(0.60, rel=1e-3)   # the other rows' truth, unbent
    pulled = fit_runs(rows, BASE, params=gemm_mem[:1], prior_sigma=None, screen=False)
    assert not pulled.excluded and abs(pulled.params[0].value - 0.60) > 1e-3


def test_rows_off_together_are_not_screened(gemm_mem):
    # every row 3x slower than the model: a new cluster, not an outlier; the fit moves the parameter
    rows = [replace(r, measured_step_s=3 * r.measured_step_s) for r in _synthetic_rows(gemm_mem, [0.72, 0.88])]
    fit = fit_runs(rows, BASE, params=gemm_mem[:1])
    assert fit.excluded == [] and fit.params[0].value < 0.72


def test_hardware_parameters_do_not_depend_on_the_framework_parameters_fitted(gemm_mem):
    # stage 1 fits the hardware with every framework as shipped: adding a framework parameter to the fit
    # leaves the hardware values as they were (it only takes up what remains in its framework's rows)
    mb = _param("microbatch_overhead_s", 0.0, 0.1, scope="megatron", kind="framework")
    truth = [gemm_mem[0], mb]
    rows = []
    for i, (plan, n, gb) in enumerate(PLANS):
        job = _job(plan, n, gb * 4)          # 4x the micro-batches: the overhead counts
        t = predict_job(job, apply_params(BASE(H100), truth, [0.65, 0.004])).step_time_s
        rows.append(FitRow(f"r{i}", "abc"[i % 3], job, t))
    alone = fit_runs(rows, BASE, params=[gemm_mem[0]], screen=False)
    both = fit_runs(rows, BASE, params=[gemm_mem[0], mb], screen=False)
    assert both.params[0].value == pytest.approx(alone.params[0].value, rel=1e-9)
    assert both.params[1].param.kind == "framework" and both.mape <= alone.mape + 1e-9
