"""A new user's first hour with the newer commands (serve, serve-search, collective, place, energy, heat,
compare-trace, calibrate --from-trace, trace-expand, goodput's fleets and policies, predict's power
flags, validate on serving runs).

Every mistake below must end as one line on stderr, ``error: <field>: <problem>; <fix>``, exit code 2:
no traceback, no hang, and no flag silently ignored or guessed (a duration or latency without a unit,
a length flag a dataset file overrides). The rest checks that each command's table reads at 80
columns and that every ``--json`` parses with ``"schema": 1``. Small models and few requests: fast.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
SERVING_CSV = ROOT / "tests" / "data" / "serving_runs_small.csv"
EXAMPLES = ROOT / "docs" / "examples"
TAPERED = str(EXAMPLES / "tapered-leaves.yaml")

SERVE = ["serve", "-m", "llama3-8b", "--gpu", "h100-sxm", "--num-requests", "20"]
SEARCH = ["serve-search", "-m", "llama3-8b", "--gpus", "h100-sxm", "--max-num-seqs", "64", "--num-requests", "20",
          "--request-rate", "1"]
ENERGY = ["energy", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "4", "--plan", "tp=1,pp=4,dp=1",
          "--micro-batch", "1", "--global-batch", "8", "--seq-len", "1024"]
GOODPUT = ["goodput", "-m", "llama3-8b", "--gpu", "h100-sxm", "-n", "64", "--plan", "tp=8,recompute=full",
           "--tokens", "1T"]
HEAT = ["heat", "--gpu", "h100-sxm", "-n", "8"]
TEMPS = "55,58,60,62,63,65,68,75"
COLL = ["collective", "--op", "all_reduce"]


from test_first_hour import refused, run  # noqa: E402  (the same one-line-refusal check as the first hour's)


def _binary(p: Path) -> Path:
    p.write_bytes(b"\xff\xfe\x00\x81")
    return p


def _files(tmp: Path) -> dict[str, Path]:
    """The files the mistakes are made in."""
    def w(name: str, text: str) -> Path:
        p = tmp / name
        p.write_text(text, encoding="utf-8")
        return p
    export = tmp / "export"
    export.mkdir()
    (export / "workload.manifest.json").write_text('{"ranks": 16}', encoding="utf-8")
    bad_export = tmp / "bad_export"
    bad_export.mkdir()
    (bad_export / "workload.manifest.json").write_text('{"ranks": -5}', encoding="utf-8")
    header = SERVING_CSV.read_text(encoding="utf-8").splitlines()[0] + "\n"
    return {
        "DIR": tmp,
        "EXPORT": export,
        "BAD_EXPORT": bad_export,
        "NAN_ARRIVAL": w("nan.csv", "arrival_time,input_len,output_len\nnan,10,10\n1,10,10\n"),
        "NEG_ARRIVAL": w("neg.csv", "arrival_time,input_len,output_len\n-1,10,10\n1,10,10\n"),
        "FRACTION": w("frac.csv", "input_len,output_len\n10.7,10\n"),
        "LONG": w("long.csv", "input_len,output_len\n100000,100000\n"),
        "LENGTHS": w("ok.csv", "input_len,output_len\n100,10\n"),
        "NULL_JSONL": w("null.jsonl", '{"input_len": 10, "output_len": null}\n'),
        "HEADER_ONLY": w("header.csv", header),
        "FILE": w("file.txt", "not a directory\n"),
        "BINARY": _binary(tmp / "binary.csv"),
        "EMPTY": w("empty.yaml", ""),
        "BAD_YAML": w("bad.yaml", "jobs: [\n"),
        "DUP_JOBS": w("dup.yaml", "jobs:\n  - {name: a, model: llama3-8b, num_gpus: 32}\n"
                                  "  - {name: a, model: llama3-8b, num_gpus: 32}\n"),
        "TYPO_JOB": w("typo.yaml", "jobs:\n  - {name: a, model: llama3-8b, num_gpu: 32}\n"),
        "UNITLESS_ARRIVAL": w("arr.yaml", "jobs:\n  - {name: a, model: llama3-8b, num_gpus: 32, arrival: 60}\n"),
        "TRACE_EMPTY": w("t.json", '{"traceEvents": []}'),
        "TRACE_BAD": w("t2.json", "{bad"),
    }


# (label, argv with placeholders, words the one line must hold)
MISTAKES = [
    # serve
    ("negative seed (numpy traceback before)", SERVE + ["--seed", "-1"], ["seed", "negative"]),
    ("unknown engine", SERVE + ["--engine", "vlm"], ["engine", "vllm"]),
    ("unknown precision", SERVE + ["--precision", "bf61"], ["precision", "bf16"]),
    ("zero requests", SERVE + ["--num-requests", "0"], ["num_requests"]),
    ("10 million requests (simulated for hours before)", SERVE + ["--num-requests", "10000000"],
     ["num_requests", "at most 100,000"]),
    ("a concurrency whose default request count would run for hours",
     ["serve", "-m", "llama3-8b", "--concurrency", "100000"], ["concurrency", "--num-requests"]),
    ("too many requests per search configuration", SEARCH + ["--slo", "ttft_p99=2s", "--num-requests", "200000"],
     ["num_requests"]),
    ("zero rate", SERVE + ["--request-rate", "0"], ["request_rate", "positive"]),
    ("NaN rate", SERVE + ["--request-rate", "nan"], ["request_rate"]),
    ("closed and open loop at once", SERVE + ["--concurrency", "4", "--request-rate", "3"], ["concurrency"]),
    ("disaggregation that does not sum", SERVE + ["--disaggregate", "1:0"], ["disaggregate"]),
    ("serving plan typo", SERVE + ["--plan", "tq=2"], ["plan", "tq"]),
    ("a plan size given twice (the last won before)", SERVE + ["--plan", "tp=2,tp=4"], ["plan.tp", "twice"]),
    ("dataset typo", SERVE + ["--dataset", "sharegp"], ["dataset", "sharegpt"]),
    ("unwritable --html (traceback before)", SERVE + ["--html", "{DIR}/no/such/dir/x.html"], ["html", "cannot write"]),
    ("a directory as --dataset-file (traceback before)", SERVE + ["--dataset-file", "{DIR}"],
     ["dataset_file", "directory"]),
    ("NaN arrival time (simulated before)", SERVE + ["--dataset-file", "{NAN_ARRIVAL}"],
     ["dataset_file.arrival_time", "row 1"]),
    ("negative arrival time", SERVE + ["--dataset-file", "{NEG_ARRIVAL}"], ["arrival_time", "row 1"]),
    ("fractional length (truncated before)", SERVE + ["--dataset-file", "{FRACTION}"],
     ["dataset_file.input_len", "10.7", "whole number"]),
    ("rows beyond the model's context (simulated before)", SERVE + ["--dataset-file", "{LONG}"],
     ["dataset_file", "200,000", "context"]),
    ("null length in JSONL", SERVE + ["--dataset-file", "{NULL_JSONL}"], ["dataset_file", "numeric"]),
    ("--dataset beside --dataset-file (ignored before)", SERVE + ["--dataset-file", "{LENGTHS}", "--dataset", "sharegpt"],
     ["dataset", "--dataset-file"]),
    ("--output-len beside --dataset-file (ignored before)", SERVE + ["--dataset-file", "{LENGTHS}", "--output-len", "5"],
     ["output_len", "--dataset-file"]),
    ("--input-len beside --dataset (ignored before)", SERVE + ["--dataset", "sharegpt", "--input-len", "100"],
     ["input_len", "--dataset sharegpt"]),
    # serve-search
    ("SLO without a unit (read as seconds before)", SEARCH + ["--slo", "ttft_p99=2"], ["slo.ttft_p99", "no unit", '"2s"']),
    ("one SLO of two without a unit", SEARCH + ["--slo", "ttft_p99=2s,tpot_p99=50"], ["slo.tpot_p99", "no unit"]),
    ("unknown SLO target", SEARCH + ["--slo", "ttfy_p99=2s"], ["slo", "ttfy_p99"]),
    ("negative price (accepted before)", SEARCH + ["--slo", "ttft_p99=2s", "--gpu-hour-price", "-1"],
     ["gpu_hour_price", "positive"]),
    ("zero price for one GPU", SEARCH + ["--slo", "ttft_p99=2s", "--gpu-hour-price", "h100-sxm=0"],
     ["gpu_hour_price", "h100-sxm"]),
    ("no GPU types (empty search before)", SEARCH + ["--slo", "ttft_p99=2s", "--gpus", ","], ["gpus", "no GPU"]),
    ("zero requests (empty ranking before)", SEARCH + ["--slo", "ttft_p99=2s", "--num-requests", "0"], ["num_requests"]),
    ("negative seed (traceback before)", SEARCH + ["--slo", "ttft_p99=2s", "--seed", "-1"], ["seed"]),
    ("--input-len beside --dataset-file", SEARCH + ["--slo", "ttft_p99=2s", "--dataset-file", "{LENGTHS}",
                                                    "--input-len", "10"], ["input_len", "--dataset-file"]),
    ("rank by cost without prices", SEARCH + ["--slo", "ttft_p99=2s", "--rank-by", "cost"], ["gpu_hour_price"]),
    # validate on serving runs
    ("a serving CSV with a header and no rows (empty table, exit 0 before)", ["validate", "{HEADER_ONLY}"],
     ["file", "no runs"]),
    ("a directory to validate (traceback before)", ["validate", "{DIR}"], ["file", "directory"]),
    ("a binary file to validate", ["validate", "{BINARY}"], ["file", "UTF-8"]),
    ("unknown --cv grouping", ["validate", str(SERVING_CSV), "--cv", "sorce"], ["cv", "source"]),
    # collective
    ("collective size typo", COLL[:2] + ["al_reduce", "--bytes", "1GiB"], ["op", "all_reduce"]),
    ("no size", COLL, ["bytes", "--sweep"]),
    ("zero bytes", COLL + ["--bytes", "0"], ["bytes"]),
    ("a bandwidth as a size", COLL + ["--bytes", "1Gbps"], ["bytes", "Gbps"]),
    ("1e30 bytes (priced before)", COLL + ["--bytes", "1e30"], ["bytes", "larger than any GPU"]),
    ("sweep past any GPU's memory", COLL + ["--sweep", "1KiB:2TiB"], ["sweep", "larger than any GPU"]),
    ("sweep backwards", COLL + ["--sweep", "1MiB:1KiB"], ["sweep"]),
    ("one GPU", COLL + ["--bytes", "1GiB", "--num-gpus", "1"], ["num_gpus"]),
    ("NVLS on an A100", COLL + ["--bytes", "1GiB", "--algorithm", "nvls", "--gpu", "a100-80gb"], ["algorithm", "nvls"]),
    ("a directory as --cluster", COLL + ["--bytes", "1GiB", "--cluster", "{DIR}"], ["cluster", "directory"]),
    # place
    ("a directory as the jobs file (said 'no file' before)", ["place", "{DIR}", "--cluster", TAPERED],
     ["jobs", "directory"]),
    ("empty jobs file", ["place", "{EMPTY}", "--cluster", TAPERED], ["jobs", "jobs: list"]),
    ("malformed YAML", ["place", "{BAD_YAML}", "--cluster", TAPERED], ["jobs", "YAML"]),
    ("two jobs of one name", ["place", "{DUP_JOBS}", "--cluster", TAPERED], ["jobs[1].name", "twice"]),
    ("a misspelt job field", ["place", "{TYPO_JOB}", "--cluster", TAPERED], ["jobs[0].num_gpu", "num_gpus"]),
    ("an arrival without its unit", ["place", "{UNITLESS_ARRIVAL}", "--cluster", TAPERED],
     ["arrival", "no unit", "90s"]),
    ("policy typo", ["place", str(EXAMPLES / "jobs.yaml"), "--cluster", TAPERED, "--policy", "sprad"], ["policy"]),
    # energy, heat and predict's power flags
    ("a cap below the planner's lowest clock (IndexError before)", ENERGY + ["--power-cap", "100W"],
     ["power-cap", "100W", "raise --power-cap"]),
    ("a locked clock below it", ENERGY + ["--clock", "300MHz"], ["clock", "raise --clock"]),
    ("slowdown out of range", ENERGY + ["--max-slowdown", "500%"], ["max-slowdown"]),
    ("slowdown not a number", ENERGY + ["--max-slowdown", "abc"], ["max-slowdown"]),
    ("temperatures short of the node", HEAT + ["--temps", "55,58"], ["temps", "give 8"]),
    ("a temperature no GPU runs at", HEAT + ["--temps", TEMPS[:-2] + "750"], ["temps", "750"]),
    ("a cap outside the GPU's range", HEAT + ["--temps", TEMPS, "--power-cap", "100W"], ["power-cap", "175"]),
    ("a zero cap", ["predict", "--power-cap", "0W"], ["power-cap"]),
    ("a clock in the wrong unit", ["predict", "--power-cap", "300MHz"], ["power-cap", "MHz"]),
    ("a clock above the reference", ["predict", "--clock", "10GHz"], ["clock"]),
    ("a cap without its unit", ["predict", "--power-cap", "300"], ["power-cap", "no unit", "500W"]),
    ("a plan field given twice", ["predict", "--plan", "tp=2,tp=4"], ["plan.tp", "given twice", "keep one"]),
    ("a clock without its unit", ["predict", "--clock", "1200"], ["clock", "no unit", "1410MHz"]),
    # compare-trace and calibrate --from-trace
    ("a directory of traces (said 'no such file' before)", ["compare-trace", "{DIR}"], ["trace", "directory"]),
    ("--top 0 (empty tables; -1 dropped a row before)", ["compare-trace", "{TRACE_EMPTY}", "--top", "0"], ["top"]),
    ("a trace without GPU kernels", ["compare-trace", "{TRACE_EMPTY}"], ["no GPU kernels"]),
    ("a trace that is not JSON", ["compare-trace", "{TRACE_BAD}"], ["not JSON"]),
    ("--from-trace and --from-runs (a CSV read as a trace before)",
     ["calibrate", "--from-trace", str(TRACES / "hta_nccl_data_2rank_a100.json.gz"), "--from-runs"],
     ["from-trace", "--from-runs"]),
    ("--from-trace with --quick (ignored before)",
     ["calibrate", "--from-trace", str(TRACES / "hta_nccl_data_2rank_a100.json.gz"), "--quick"], ["--quick"]),
    ("--out in a missing directory (traceback after the fit before)",
     ["calibrate", "--from-trace", str(TRACES / "hta_nccl_data_2rank_a100.json.gz"), "--gpu", "a100-80gb",
      "--out", "{DIR}/no/such/p.yaml"], ["out", "cannot write"]),
    # trace-expand
    ("a reversed rank range ('none is not a rank' before)", ["trace-expand", "{EXPORT}", "--ranks", "5-2"],
     ["ranks", "backwards", '"2-5"']),
    ("no ranks", ["trace-expand", "{EXPORT}", "--ranks", ""], ["ranks", "no rank"]),
    ("a rank beyond the world", ["trace-expand", "{EXPORT}", "--ranks", "0-99"], ["ranks", "0..15"]),
    ("--out is a file (traceback before)", ["trace-expand", "{EXPORT}", "--out", "{FILE}"], ["out", "is a file"]),
    ("a manifest with a negative world", ["trace-expand", "{BAD_EXPORT}"], ["directory", "-5"]),
    ("no export in the directory", ["trace-expand", "{DIR}", "--name", "wrkload"], ["directory", "wrkload"]),
    # goodput: fleets, policies, detection
    ("fleet typo", GOODPUT + ["--fleet", "meta-rcs"], ["fleet", "meta-rsc"]),
    ("a directory as --fleet", GOODPUT + ["--fleet", "{DIR}"], ["fleet", "directory"]),
    ("an empty fleet file", GOODPUT + ["--fleet", "{EMPTY}"], ["fleet"]),
    ("policy typo", GOODPUT + ["--policy", "restrat"], ["policy", "restart"]),
    ("--policy with --compare-policies", GOODPUT + ["--compare-policies", "--policy", "hot-spare"], ["policy"]),
    ("--fleet with --failure-model", GOODPUT + ["--fleet", "meta-rsc", "--failure-model", "llama3"], ["fleet"]),
    ("detection typo", GOODPUT + ["--detection", "heath-check"], ["detection", "health-check"]),
    ("detection without a unit (seconds guessed before)", GOODPUT + ["--detection", "5"], ["detection", "no unit"]),
    ("replace time without a unit (guessed before)", GOODPUT + ["--replace-time", "5"], ["replace_time", "no unit"]),
    ("negative replace time", GOODPUT + ["--replace-time", "-5s"], ["reschedule_s"]),
    ("a Monte Carlo that would eat the machine", GOODPUT + ["--compare-policies", "--monte-carlo", "100000000"],
     ["monte_carlo"]),
]


@pytest.mark.parametrize("label,argv,words", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_new_command_mistakes_are_one_line(label, argv, words, tmp_path, capsys) -> None:
    files = _files(tmp_path)
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    code, out, err = run(capsys, *args)
    refused(code, err, *words)
    assert out == "", out


# ---- 80 columns and JSON schema 1 -----------------------------------------------------------------------

TABLES = [
    SERVE + ["--request-rate", "5"],
    SEARCH + ["--slo", "ttft_p99=2s,tpot_p99=50ms"],
    COLL + ["--sweep", "1KiB:1GiB:32", "--num-gpus", "16"],
    ["place", str(EXAMPLES / "jobs.yaml"), "--cluster", TAPERED, "--policy", "spread"],
    ENERGY + ["--max-slowdown", "0.01"],
    HEAT + ["--temps", TEMPS],
    ["compare-trace", str(TRACES / "hta_nccl_data_2rank_a100.json.gz"), "--gpu", "a100-80gb", "-m", "gpt3-125m"],
    ["validate", str(SERVING_CSV)],
    GOODPUT + ["--compare-policies", "--monte-carlo", "20", "--seed", "1"],
    ["predict", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "8", "--power-cap", "300W"],
]


@pytest.mark.parametrize("argv", TABLES, ids=[a[0] for a in TABLES])
def test_tables_read_at_80_columns(argv, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)


JSONS = [
    SERVE + ["--concurrency", "4"],
    SEARCH + ["--slo", "ttft_p99=2s"],
    COLL + ["--bytes", "1GiB"],
    COLL + ["--sweep", "1KiB:1MiB:32"],
    ["place", str(EXAMPLES / "jobs.yaml"), "--cluster", TAPERED],
    ENERGY,
    HEAT + ["--temps", TEMPS],
    ["compare-trace", str(TRACES / "hta_nccl_data_2rank_a100.json.gz"), "--gpu", "a100-80gb", "-m", "gpt3-125m"],
    ["validate", str(SERVING_CSV)],
    GOODPUT + ["--fleet", "meta-rsc", "--policy", "hot-spare", "--detection", "collective-tracing"],
    GOODPUT + ["--compare-policies", "--monte-carlo", "20"],
    ["predict", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "8", "--clock", "1200MHz"],
]


@pytest.mark.parametrize("argv", JSONS, ids=[a[0] for a in JSONS])
def test_json_parses_with_schema_1(argv, capsys) -> None:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    assert json.loads(out)["schema"] == 1


def test_calibrate_from_trace_and_trace_expand_json(tmp_path, capsys) -> None:
    code, out, err = run(capsys, "calibrate", "--from-trace", TRACES / "hta_nccl_data_2rank_a100.json.gz", "--gpu",
                         "a100-80gb", "--out", tmp_path / "p.yaml", "--json")
    assert code == 0, err
    assert json.loads(out)["schema"] == 1 and (tmp_path / "p.yaml").exists()
    code, out, err = run(capsys, "trace", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "2", "--plan", "tp=1,pp=2,dp=1",
                         "--global-batch", "2", "--seq-len", "256", "--format", "chakra", "--layout", "compact",
                         "--out", tmp_path / "ce")
    assert code == 0, err
    code, out, err = run(capsys, "trace-expand", tmp_path / "ce", "--ranks", "0-1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema"] == 1 and data["files"] == 2


def test_serving_dataset_rows_are_read_as_written(tmp_path, capsys) -> None:
    """A good file still runs: whole-number lengths written as 100.0 are whole numbers."""
    p = tmp_path / "ok.csv"
    p.write_text("arrival_time,input_len,output_len\n0,100.0,10\n0.5,200,20\n", encoding="utf-8")
    code, out, err = run(capsys, "serve", "-m", "llama3-8b", "--gpu", "h100-sxm", "--dataset-file", p, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema"] == 1
