"""Refusals and defaults a user meets on the command line: each bad input is one line naming the field
and the fix, exit code 2, no traceback; an input the user did not give takes the documented default."""
from __future__ import annotations

import json

import pytest

from test_first_hour import refused, run   # the one CLI runner and refusal check of the first-hour tests


# ---- serve: a token budget below a whole request without chunked prefill ---------------------------------

SERVE = ("serve", "-m", "llama3-8b", "--gpu", "h100", "--num-gpus", "1", "--num-requests", "8", "--concurrency", "2")


def test_unchunked_budget_below_the_request_is_refused(capsys):
    """vLLM refuses max_num_batched_tokens < max_model_len with chunked prefill off; the smallest max_model_len
    serving 2,048 + 128-token requests is 2,176, so a budget of 512 (or 2,048: the output does not fit) is refused."""
    for budget in (512, 2048):
        code, _, err = run(capsys, *SERVE, "--no-chunked-prefill", "--max-num-batched-tokens", budget,
                           "--input-len", 2048, "--output-len", 128)
        line = refused(code, err, "max-num-batched-tokens", "2176", "--no-chunked-prefill")
        assert f"{budget:,} tokens per step" in line


def test_unchunked_budget_holding_the_request_runs(capsys):
    code, out, err = run(capsys, *SERVE, "--no-chunked-prefill", "--max-num-batched-tokens", 2176,
                         "--input-len", 2048, "--output-len", 128, "--json")
    assert code == 0, err
    assert json.loads(out)["schema"] == 1


def test_a_small_budget_with_chunked_prefill_is_chunking_not_an_error(capsys):
    code, _, err = run(capsys, *SERVE, "--max-num-batched-tokens", 512, "--input-len", 2048, "--output-len", 16,
                       "--json")
    assert code == 0, err


def test_unchunked_budget_below_the_longest_dataset_request_is_refused(capsys, tmp_path):
    f = tmp_path / "lengths.csv"
    f.write_text("input_len,output_len\n100,10\n3000,50\n200,20\n")
    code, _, err = run(capsys, "serve", "-m", "llama3-8b", "--gpu", "h100", "--num-gpus", "1", "--dataset-file", f,
                       "--no-chunked-prefill", "--max-num-batched-tokens", 2048)
    refused(code, err, "max-num-batched-tokens", "dataset-file", "3,000 + 50", "3050")


# ---- --framework with no --plan: the stack's default ZeRO stage ----------------------------------------


@pytest.mark.parametrize("framework,zero", [("megatron@2021", 0), ("megatron-lm@2021", 0), ("torchtitan", 3),
                                            ("megatron", 1)])
def test_framework_without_plan_takes_the_stacks_zero_stage(capsys, framework, zero):
    from clustertwin.jobs import JobOptions, job_from_options
    for o in (JobOptions(framework=framework), JobOptions(framework=framework, model="gpt3-1.3b", num_gpus=8)):
        assert job_from_options(o).plan.zero_stage == zero
    code, out, err = run(capsys, "predict", "--framework", framework, "--json")
    assert code == 0, err


def test_default_job_keeps_zero_1_under_megatron():
    """The README's default job (plan tp=2,pp=1,dp=32,zero=1) is unchanged under the default framework."""
    from clustertwin.jobs import DEFAULT_PLAN, JobOptions, job_from_options, make_training_job
    a = job_from_options(JobOptions())
    b = make_training_job("llama3-8b", plan=DEFAULT_PLAN, micro_batch=1, seq_len=8192)
    assert a.plan == b.plan and a.plan.zero_stage == 1


def test_explicit_zero_the_stack_lacks_is_still_refused(capsys):
    code, _, err = run(capsys, "predict", "--framework", "megatron@2021", "--plan", "tp=2,pp=1,dp=32,zero=1")
    refused(code, err, "zero_stage", "ZeRO-1")


@pytest.mark.parametrize("framework,zero", [("torchtitan", 3), ("megatron-lm@2021", 0), ("meta-llama3", 2),
                                            ("megatron", 1)])
def test_plan_without_zero_takes_the_stacks_zero_stage(capsys, framework, zero):
    """A --plan that names no ZeRO stage gets the stack's (as validate does for a row without one), not a
    ZeRO-1 the stack may not have; the other fields the plan names are kept."""
    from clustertwin.jobs import make_training_job
    job = make_training_job("llama3-8b", num_gpus=8, plan="tp=2,dp=4,mb=2", framework=framework)
    assert (job.plan.zero_stage, job.plan.tp, job.plan.micro_batch) == (zero, 2, 2)
    code, out, err = run(capsys, "predict", "-m", "llama3-8b", "-n", "8", "--framework", framework,
                         "--plan", "tp=2,dp=4", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["plan"]["zero_stage"] == zero


def test_plan_naming_fsdp_keeps_it():
    from clustertwin.jobs import make_training_job
    assert make_training_job("llama3-8b", num_gpus=8, plan="tp=2,fsdp", framework="megatron").plan.zero_stage == 3


@pytest.mark.parametrize("cmd", [("sim",), ("energy",), ("trace", "--format", "json", "-o", "{tmp}/t.json"),
                                 ("compare", "--gpu", "h100", "--gpu", "a100-80gb")])
def test_other_commands_take_the_stacks_zero_stage(capsys, tmp_path, cmd):
    args = [a.replace("{tmp}", str(tmp_path)) for a in cmd]
    code, _, err = run(capsys, *args, "--framework", "megatron@2021")
    assert code == 0, err


# ---- goodput: host checkpoint rates on the command line ----------------------------------------------


def _ckpt(capsys, *flags):
    code, out, err = run(capsys, "goodput", "--tokens", "1T", "--json", *flags)
    assert code == 0, err
    return json.loads(out)["checkpoint"]


def test_host_checkpoint_rates_are_parsed_with_units(capsys):
    """A sync checkpoint's stall = pageable copy + max(serialisation, storage): faster host rates shrink it."""
    base = _ckpt(capsys)
    fast = _ckpt(capsys, "--pageable-copy-bandwidth", "12.6GB/s", "--serialize-bandwidth", "2GiB/s")
    slow = _ckpt(capsys, "--pageable-copy-bandwidth", "700MB/s")
    assert fast["blocking_s"] < base["blocking_s"] < slow["blocking_s"]
    # the copy term alone: the largest shard at 700 MB/s instead of 1.4 GB/s
    shard = base["bytes_per_gpu_max"]
    assert slow["blocking_s"] - base["blocking_s"] == pytest.approx(shard / 0.7e9 - shard / 1.4e9, rel=1e-6)


@pytest.mark.parametrize("flag,value,words", [
    ("--pageable-copy-bandwidth", "1.4", ("pageable-copy-bandwidth", "no unit")),
    ("--serialize-bandwidth", "700", ("serialize-bandwidth", "no unit")),
    ("--pageable-copy-bandwidth", "1.4MB/s", ("pageable-copy-bandwidth", "plausible", "450 GB/s")),
    ("--serialize-bandwidth", "2TB/s", ("serialize-bandwidth", "plausible", "500 GB/s")),
    ("--serialize-bandwidth", "0GB/s", ("serialize-bandwidth",)),
    ("--pageable-copy-bandwidth", "fast", ("pageable-copy-bandwidth",)),
])
def test_bad_host_checkpoint_rates_are_refused(capsys, flag, value, words):
    code, _, err = run(capsys, "goodput", "--tokens", "1T", flag, value)
    refused(code, err, *words)


def test_host_rates_are_bounded_in_the_python_api_too():
    from clustertwin.errors import ClusterTwinError
    from clustertwin.reliability.goodput import GoodputOptions
    assert GoodputOptions(pageable_copy_bytes_per_s="12.6GB/s").pageable_copy_bytes_per_s == pytest.approx(12.6e9)
    with pytest.raises(ClusterTwinError, match="pageable_copy_bytes_per_s"):
        GoodputOptions(pageable_copy_bytes_per_s=1.4)          # 1.4 B/s: GB/s meant
    with pytest.raises(ClusterTwinError, match="serialize_bytes_per_s"):
        GoodputOptions(serialize_bytes_per_s=1e13)


def test_goodput_help_lists_the_host_rate_flags(capsys):
    code, out, _ = run(capsys, "goodput", "--help")
    assert code == 0 and "--pageable-copy-bandwidth" in out and "--serialize-bandwidth" in out


# ---- the validation reports share their row bookkeeping ----------------------------------------------


def test_training_and_serving_reports_split_rows_and_group_errors_alike():
    from clustertwin.validate.compare import RowResult, ValidationReport
    from clustertwin.validate.serving import ServingReport, ServingRow
    t = ValidationReport([RowResult("a", "step_time_s", 2.0, 2.2, 0.1), RowResult("b", "mfu", 0.4, None, None, "x"),
                          RowResult("c", "step_time_s", 1.0, 0.7, -0.3)])
    assert [r.run_id for r in t.ok_rows] == ["a", "c"] and [r.run_id for r in t.failed_rows] == ["b"]
    assert t.mape_by_metric == pytest.approx({"step_time_s": 0.2})
    s = ServingReport([ServingRow("r1", "ttft_mean_s", 1.0, {}, 2, source="z", predicted=1.5),
                       ServingRow("r2", "ttft_mean_s", 2.0, {}, 3, source="a", predicted=1.0),
                       ServingRow("r3", "ttft_mean_s", 2.0, {}, 4, source="a", reason="no lengths")])
    assert [r.run_id for r in s.ok_rows] == ["r1", "r2"] and [r.run_id for r in s.failed_rows] == ["r3"]
    by = s.mape_by(lambda r: r.source)
    assert list(by) == ["a", "z"] and by == pytest.approx({"a": 0.5, "z": 0.5})   # sorted by key


# ---- first hour: a duration without its unit ----------------------------------------------------------


@pytest.mark.parametrize("cmd", [("goodput", "--tokens", "1T"), ("report", "--tokens", "1T", "-o", "{tmp}/r.html")])
def test_a_checkpoint_interval_without_unit_is_refused(capsys, tmp_path, cmd):
    """"5" was read as 5 seconds (then rounded to whole steps): seconds or minutes? refused like --mtbf."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in cmd]
    code, _, err = run(capsys, *args, "--checkpoint-interval", "5")
    refused(code, err, "checkpoint-interval", "no unit", "30min")
    assert not (tmp_path / "r.html").exists()


def test_a_checkpoint_interval_with_unit_is_taken(capsys):
    code, out, err = run(capsys, "goodput", "--tokens", "1T", "--checkpoint-interval", "30min", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["checkpoint_interval_source"] == "given"
    assert abs(d["checkpoint_interval_s"] - 1800) <= 3.5      # rounded to whole steps of ~3.2 s


def test_sim_slowdown_without_a_slow_rank_is_refused(capsys):
    """--slowdown alone slowed no GPU and was dropped without a word."""
    code, _, err = run(capsys, "sim", "--slowdown", "1.2")
    refused(code, err, "slowdown", "--slow-rank")


def test_sim_slow_rank_takes_the_default_slowdown(capsys):
    code, out, err = run(capsys, "sim", "-m", "gpt3-125m", "--gpu", "h100", "-n", "8", "--plan", "tp=2,pp=2,dp=2",
                         "--slow-rank", "0", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["slowdown"] == 1.1 and d["step_time_s"] >= d["baseline_step_time_s"]


def test_sweep_to_an_output_that_cannot_be_a_directory_is_refused(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(capsys, "sweep", "docs/sweep-example.yaml", "-o", blocker / "sub")
    refused(code, err, "output", "cannot create")


# ---- first hour: one value given two ways -------------------------------------------------------------


@pytest.mark.parametrize("plan,flag,value,field", [
    ("tp=2,pp=1,dp=32,mb=2", "--micro-batch", "4", "plan.micro_batch"),
    ("tp=2,pp=1,dp=32,gbs=512", "--global-batch", "256", "plan.global_batch"),
    ("tp=2,pp=1,dp=32,precision=fp8", "--precision", "bf16", "plan.precision"),
])
def test_a_plan_field_and_its_flag_must_agree(capsys, plan, flag, value, field):
    """--micro-batch 4 silently replaced the plan's mb=2; now the contradiction is refused (as search --fix does)."""
    code, _, err = run(capsys, "predict", "--plan", plan, flag, value)
    refused(code, err, field, flag, "contradicts")


def test_a_plan_field_and_its_flag_that_agree_are_taken(capsys):
    code, out, err = run(capsys, "predict", "--plan", "tp=2,pp=1,dp=32,mb=2", "--micro-batch", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["plan"]["micro_batch"] == 2


def test_an_slo_target_given_twice_is_refused(capsys):
    code, _, err = run(capsys, "serve-search", "--slo", "ttft_p99=2s,ttft_p99=1s", "--request-rate", "1")
    refused(code, err, "slo.ttft_p99", "twice")


# ---- recipe plan fields: accepted with the flags they need, refused where the stack lacks them -----------


def test_fp8_params_with_precision_flag_is_one_fp8_plan(capsys):
    """fp8_params=1 needs FP8 training: given by --precision fp8 beside the plan, the two are checked together
    (predict and search's --fix alike); without it the plan is refused in one line."""
    code, out, err = run(capsys, "predict", "-m", "llama3-8b", "-n", "8", "--precision", "fp8",
                         "--plan", "tp=2,pp=2,fp8_params=1", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["plan"]["fp8_params"] is True
    code, _, err = run(capsys, "predict", "-m", "llama3-8b", "-n", "8", "--plan", "tp=2,pp=2,fp8_params=1")
    refused(code, err, "fp8_params", "precision")
    from clustertwin.specs.plan import parse_fixed
    assert parse_fixed("tp=2,fp8_params=1", "fp8") == {"tp": 2, "fp8_params": True}
    code, _, err = run(capsys, "predict", "-m", "llama3-8b", "-n", "8", "--precision", "fp8",
                       "--plan", "tp=2,precision=bf16")
    refused(code, err, "precision", "contradicts")


@pytest.mark.parametrize("framework,plan,field", [
    ("megatron", "tp=2,pp=1,defer_embedding_wgrad=22", "defer_embedding_wgrad"),
    ("torchtitan", "tp=2,pp=2,defer_embedding_wgrad=22", "defer_embedding_wgrad"),
    ("torchtitan", "tp=2,recompute_modules=layernorm", "recompute_modules"),
    ("hai-llm", "tp=2,recompute_modules=layernorm", "recompute_modules"),
    ("torchtitan", "tp=2,adam_moments_dtype=bf16", "adam_moments_dtype"),
    ("torchtitan", "tp=2,master_weights=0", "master_weights"),
])
def test_recipe_fields_the_stack_lacks_are_refused(capsys, framework, plan, field):
    code, _, err = run(capsys, "predict", "-m", "llama3-8b", "-n", "8", "--framework", framework, "--plan", plan)
    refused(code, err, field)


def test_master_weights_with_fp32_training_is_refused(capsys):
    code, _, err = run(capsys, "predict", "-m", "llama3-8b", "-n", "8", "--precision", "fp32",
                       "--plan", "tp=2,master_weights=0")
    refused(code, err, "master_weights", "fp32")


def test_recompute_modules_imply_selective_and_read_back():
    from clustertwin.specs.plan import parse_plan
    p = parse_plan("tp=2,recompute_modules=mlp+layernorm")
    assert p.recompute == "selective" and p.recompute_modules == ("layernorm", "mlp")
    full = parse_plan("tp=2,pp=2,dp=2,recompute_modules=layernorm,adam_moments_dtype=bf16,master_weights=1,"
                      "master_weights_dtype=bf16,defer_embedding_wgrad=22,fp8_params=1,precision=fp8")
    assert "recompute_modules=layernorm" in full.short() and "fp8_params=1" in full.short()
    assert parse_plan(full.short() + ",precision=fp8") == full     # the plan's text reads back as the plan


def test_a_fractional_count_in_a_csv_cell_is_refused_not_truncated(capsys, tmp_path):
    from clustertwin.errors import DataError
    from clustertwin.validate.runs import _int
    assert _int({"tp": "8"}, "tp") == 8 and _int({"tp": "8.0"}, "tp") == 8
    with pytest.raises(DataError, match="whole number"):
        _int({"defer_embedding_wgrad": "1.5"}, "defer_embedding_wgrad")
