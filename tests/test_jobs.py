"""One default job and one set of job options for every command (clustertwin.jobs, cli_options):
every command accepts the same flags, refuses the same bad input with the same one line and exit 2,
and without options describes the same built-in job."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustertwin.cli import main
from clustertwin.errors import PlanError
from clustertwin.jobs import (DEFAULT_GLOBAL_BATCH, DEFAULT_MICRO_BATCH, DEFAULT_MODEL, DEFAULT_NUM_GPUS,
                              DEFAULT_SEQ_LEN, JobOptions, default_job, job_from_options, make_training_job,
                              search_inputs)

try:
    import plotly  # noqa: F401
    HAVE_PLOTLY = True
except ImportError:
    HAVE_PLOTLY = False

SHARED = ["--model", "--gpu", "--num-gpus", "--gpus-per-node", "--cluster", "--plan", "--micro-batch",
          "--global-batch", "--seq-len", "--precision", "--framework"]
JOB_COMMANDS = ["predict", "search", "goodput", "trace", "sim", "report"]
PRICED_BY_PROFILE = {"predict", "goodput", "trace", "sim"}
SMALL = ["--model", "gpt3-125m", "--gpu", "h100", "--num-gpus", "8", "--plan", "tp=2,pp=2,dp=2", "--micro-batch", "1",
         "--global-batch", "8", "--seq-len", "1024"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def command_args(cmd: str, tmp: Path) -> list[str]:
    """What each command needs besides the job options to get as far as building the job."""
    return {"predict": [], "sim": [], "search": ["--top", "1", "--pareto-points", "1", "-q"],
            "goodput": ["--tokens", "1T"], "trace": ["--format", "json", "--out", str(tmp / "g.json")],
            "report": ["--out", str(tmp / "r.html"), "--no-search", "-q"]}[cmd]


def commands() -> list:
    return [pytest.param(c, marks=pytest.mark.skipif(c == "report" and not HAVE_PLOTLY, reason="report needs plotly"))
            for c in JOB_COMMANDS]


# ---- the Python side ------------------------------------------------------------------------------
def test_default_job_is_the_readme_job():
    job = default_job()
    assert job.model.name == DEFAULT_MODEL == "llama3-8b"
    assert job.cluster.num_gpus == DEFAULT_NUM_GPUS == 64 and job.cluster.gpu.name == "h100-sxm"
    p = job.plan
    assert (p.tp, p.pp, p.dp, p.zero_stage, p.recompute) == (2, 1, 32, 1, "none")
    assert p.micro_batch == DEFAULT_MICRO_BATCH == 1 and p.global_batch == DEFAULT_GLOBAL_BATCH == 256
    assert job.seq_len == DEFAULT_SEQ_LEN == 8192 and job.framework == "megatron" and p.precision == "bf16"


def test_options_that_name_a_job_leave_the_default_plan_out():
    # a model (or cluster, GPU, GPU count, plan) given: what is given, the plan's own defaults otherwise
    assert JobOptions().is_default_job and not JobOptions(num_gpus=8).is_default_job
    assert not JobOptions(model="gpt3-125m").is_default_job
    job = job_from_options(JobOptions(model="gpt3-125m", gpu="h100", num_gpus=8))
    assert job == make_training_job("gpt3-125m", gpu="h100", num_gpus=8)
    # options that do not name a job (batch, sequence, precision) change the default job
    assert job_from_options(JobOptions(global_batch=512)).plan.global_batch == 512
    assert job_from_options(JobOptions(seq_len=4096)).plan.tp == 2


def test_search_inputs_hold_the_given_plan_fields_fixed():
    s = search_inputs(JobOptions())
    assert (s.model.name, s.cluster.num_gpus, s.global_batch, s.seq_len, s.precision, s.fixed) == \
        ("llama3-8b", 64, 256, 8192, "bf16", {})
    s = search_inputs(JobOptions(model="gpt3-125m", gpu="h100", num_gpus=8, plan="tp=2,gb=64,precision=fp8",
                                 micro_batch=2))
    assert s.fixed == {"tp": 2, "micro_batch": 2} and s.global_batch == 64 and s.precision == "fp8"
    assert s.seq_len == 2048                               # the model's (at most 8192), as predict's
    assert s.fix_with("recompute=full") == {"recompute": "full", "tp": 2, "micro_batch": 2}
    assert s.fix_with("tp=2") == {"tp": 2, "micro_batch": 2}
    with pytest.raises(PlanError, match="fix.tp"):
        s.fix_with("tp=4")
    with pytest.raises(PlanError, match="plan.first_stage_layers"):
        search_inputs(JobOptions(model="gpt3-125m", plan="pp=2,first=4"))


# ---- the command line: the same flags everywhere ---------------------------------------------------
@pytest.mark.parametrize("cmd", JOB_COMMANDS)
def test_every_command_takes_the_shared_flags(cmd, capsys):
    code, out, _ = run(capsys, cmd, "--help")
    assert code == 0
    for flag in SHARED:
        assert flag in out, (cmd, flag)
    assert ("--profile" in out) == (cmd in PRICED_BY_PROFILE), cmd


BAD = [
    (["--plan", "banana"], "plan"),
    (["--plan", "tp=two"], "plan.tp"),
    (["--model", "no-such-model"], "model"),
    (["--num-gpus", "0"], "num_gpus"),
    (["--num-gpus", "many"], "--num-gpus"),
    (["--gpu", "h900"], "gpu"),
    (["--cluster", "no-such-cluster"], "cluster"),
    (["--gpus-per-node", "0"], "gpus_per_node"),
    (["--micro-batch", "0"], "plan.micro_batch"),
    (["--global-batch", "0"], "plan.global_batch"),
    (["--seq-len", "0"], "seq_len"),
    (["--precision", "fp7"], "plan.precision"),
    (["--framework", "jax"], "framework"),
    (["--model", "gpt3-125m", "--plan", "tp=two"], "plan.tp"),
]


@pytest.mark.parametrize("bad,field", BAD, ids=[" ".join(b) for b, _ in BAD])
@pytest.mark.parametrize("cmd", commands())
def test_every_command_refuses_bad_job_input_the_same_way(cmd, bad, field, capsys, tmp_path):
    code, _, err = run(capsys, "predict", *bad)
    expected = err.strip()
    assert code == 2 and expected.startswith(f"error: {field}") and "\n" not in expected, expected
    code, out, err = run(capsys, cmd, *bad, *command_args(cmd, tmp_path))
    assert code == 2, (out, err)
    line = err.strip()
    assert "\n" not in line and "Traceback" not in err
    assert line == expected.replace("clustertwin predict --help", f"clustertwin {cmd} --help")


@pytest.mark.parametrize("cmd", sorted(PRICED_BY_PROFILE))
def test_every_priced_command_reads_the_profile_the_same_way(cmd, capsys, tmp_path):
    missing = tmp_path / "no-such-profile.yaml"
    code, _, expected = run(capsys, "predict", "--profile", missing)
    assert code == 2
    code, _, err = run(capsys, cmd, "--profile", missing, *command_args(cmd, tmp_path))
    assert code == 2 and err == expected


# ---- the command line: one default job --------------------------------------------------------------
def test_no_options_is_the_default_job_in_every_command(capsys, tmp_path):
    code, out, err = run(capsys, "predict", "--json")
    assert code == 0, err
    pred = json.loads(out)
    plan, step = pred["inputs"]["plan"], pred["step_time_s"]
    assert pred["inputs"]["model"]["name"] == "llama3-8b" and pred["inputs"]["cluster"]["num_gpus"] == 64
    assert (plan["tp"], plan["dp"], plan["micro_batch"], plan["global_batch"], pred["inputs"]["seq_len"]) == \
        (2, 32, 1, 256, 8192)

    code, out, err = run(capsys, "goodput", "--tokens", "1T", "--json")
    assert code == 0, err
    assert json.loads(out)["step_time_s"] == step

    code, out, err = run(capsys, "sim", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["predicted_step_time_s"] == step

    graph = tmp_path / "g.json"
    code, _, err = run(capsys, "trace", "--format", "json", "--out", graph)
    assert code == 0, err
    g = json.loads(graph.read_text())
    assert g["plan"] == plan and g["job"]["seq_len"] == 8192 and g["job"]["model"]["name"] == "llama3-8b"
    assert g["job"]["cluster"]["num_gpus"] == 64

    if HAVE_PLOTLY:
        code, out, err = run(capsys, "report", "--no-search", "--out", tmp_path / "r.html", "--json", "-", "-q")
        assert code == 0, err
        r = json.loads(out)
        assert r["job"]["plan"] == plan and r["summary"]["step_time_s"] == step
        assert (r["job"]["model"], r["job"]["num_gpus"], r["job"]["global_batch"], r["job"]["seq_len"]) == \
            ("llama3-8b", 64, 256, 8192)


def test_search_without_options_searches_the_default_job(capsys):
    code, out, err = run(capsys, "search", "--top", "1", "--pareto-points", "1", "--json")
    assert code == 0, err
    i = json.loads(out)["inputs"]
    assert (i["model"], i["num_gpus"], i["gpu"], i["global_batch"], i["seq_len"], i["precision"], i["fixed"]) == \
        ("llama3-8b", 64, "h100-sxm", 256, 8192, "bf16", {})


def test_search_holds_the_plan_and_micro_batch_fixed(capsys):
    code, out, err = run(capsys, "search", *SMALL[:6], "--plan", "tp=2,gb=16", "--micro-batch", "2", "--seq-len",
                         "1024", "--top", "3", "--pareto-points", "1", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["inputs"]["fixed"] == {"tp": 2, "micro_batch": 2} and r["inputs"]["global_batch"] == 16
    assert all(p["plan"]["tp"] == 2 and p["plan"]["micro_batch"] == 2 for p in r["plans"])
    code, _, err = run(capsys, "search", *SMALL[:6], "--plan", "tp=2", "--fix", "tp=4")
    assert code == 2 and err.startswith("error: fix.tp:") and err.count("\n") == 1


def test_the_same_job_gives_the_same_step_in_every_command(capsys, tmp_path):
    code, out, _ = run(capsys, "predict", *SMALL, "--json")
    step = json.loads(out)["step_time_s"]
    code, out, _ = run(capsys, "goodput", *SMALL, "--tokens", "1B", "--json")
    assert code == 0 and json.loads(out)["step_time_s"] == step
    code, out, _ = run(capsys, "sim", *SMALL, "--json")
    assert code == 0 and json.loads(out)["predicted_step_time_s"] == step


def test_profile_prices_the_same_in_every_command(capsys, tmp_path):
    from clustertwin.calibrate.fit import fit_profile
    from clustertwin.calibrate.profile import save_profile
    from clustertwin.catalog import load_gpu
    # SYNTHETIC test data (tests/data/calibrate_synthetic_raw.json): not a measurement
    raw = json.loads((Path(__file__).parent / "data" / "calibrate_synthetic_raw.json").read_text())
    prof = save_profile(fit_profile(raw, load_gpu("h100-sxm"), source="SYNTHETIC test fixture", synthetic=True),
                        tmp_path / "h100.yaml")
    _, out, _ = run(capsys, "predict", *SMALL, "--json")
    plain = json.loads(out)["step_time_s"]
    code, out, err = run(capsys, "predict", *SMALL, "--profile", prof, "--json")
    assert code == 0, err
    step = json.loads(out)["step_time_s"]
    assert step != plain
    code, out, err = run(capsys, "goodput", *SMALL, "--profile", prof, "--tokens", "1B", "--json")
    assert code == 0 and json.loads(out)["step_time_s"] == step, err
    code, out, err = run(capsys, "sim", *SMALL, "--profile", prof, "--json")
    assert code == 0 and json.loads(out)["predicted_step_time_s"] == step, err
    code, out, err = run(capsys, "trace", *SMALL, "--profile", prof, "--format", "perfetto", "--out",
                         tmp_path / "t.json", "--json")
    assert code == 0, err
    code, out2, err = run(capsys, "sim", *SMALL, "--profile", prof, "--json")
    assert json.loads(out)["step_time_s"] == json.loads(out2)["step_time_s"]


def test_python_predict_without_arguments_is_the_commands_default_job(capsys) -> None:
    """clustertwin.predict() and `clustertwin predict` describe the same default job."""
    import json

    import clustertwin
    from clustertwin.cli import main
    r = clustertwin.predict()
    assert main(["predict", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_s"] == r.step_time_s
    assert out["inputs"]["plan"]["global_batch"] == r.job.plan.global_batch == 256
