"""Output for people and for scripts: every terminal table reads at 80 columns (no line wider, no
cell over two lines) and uses a wider terminal; progress goes to stderr only, counts every plan and
is silent when asked or piped; `compare` side by side with deltas; short reprs of the Python API."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from clustertwin.catalog import list_presets, load_cluster, load_model
from clustertwin.cli import main
from clustertwin.compare import compare
from clustertwin.jobs import JobOptions
from clustertwin.predict import make_training_job, predict, predict_job
from clustertwin.report import console as rc
from clustertwin.search import search
from clustertwin.search.tuner import bottleneck_tag

DATA = Path(__file__).resolve().parents[1] / "data" / "validation"


def _lines(renderable, width: int) -> list[str]:
    con = Console(width=width, record=True, file=open("/dev/null", "w"), color_system=None)
    con.print(renderable)
    return [line.rstrip() for line in con.export_text().splitlines()]


def _check(items: list, width: int = 80) -> None:
    """No line wider than ``width``; every Fit table's rows one or two lines each."""
    for item in items:
        lines = _lines(item, width)
        assert all(len(x) <= width for x in lines), "\n".join(x for x in lines if len(x) > width)
        if isinstance(item, rc.Fit):
            t = item.table(width)
            header = max(c.header.count("\n") + 1 for c in item.columns) + 1 if item.show_header else 0
            title = len(_lines(t.title, width)) if t.title else 0
            caption = len(_lines(t.caption, width)) if t.caption else 0
            assert len(lines) <= title + header + 2 * item.row_count + caption, "\n".join(lines)


@pytest.fixture(scope="module")
def small_search():
    return search("gpt3-125m", gpu="a100-80gb", num_gpus=16, global_batch=16, top=4, objective="cost",
                  gpu_hour_price=2.0, tokens=1e11)


@pytest.mark.parametrize("kind", ["models", "gpus", "nodes", "clusters"])
def test_list_reads_at_80_columns_with_names_whole(kind) -> None:
    rows = list_presets(kind)
    table = rc.catalog_table(kind, rows)
    _check([table])
    text = "\n".join(_lines(table, 80))
    assert all(r["name"] in text for r in rows)          # never cut
    assert "source" in text                              # the first clause of each, cut to the room
    wide = "\n".join(_lines(table, 200))
    assert all(rc.short_source(r["source"]) in wide for r in rows)


def test_short_source_is_the_first_clause() -> None:
    assert rc.short_source("DeepSeek-AI 2024, DeepSeek-V3 Technical Report; HF") == "DeepSeek-AI 2024"
    assert rc.short_source("NVIDIA datasheet (nvidia.com, 2021), A100 column") == "NVIDIA datasheet (nvidia.com, 2021)"
    assert rc.short_source("one clause") == "one clause"


def test_list_wide_shows_the_full_sources(capsys) -> None:
    assert main(["list", "models", "--wide"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    src = " ".join(load_model("deepseek-v3").source.split())
    assert src.split(";")[0] in out


def test_describe_predict_read_at_80_columns() -> None:
    _check([rc.model_table(load_model("deepseek-v3")), rc.cluster_table(load_cluster("meta-llama3-24k"))])
    _check(rc.prediction_tables(predict("gpt3-1.3b", gpu="a100-80gb", num_gpus=16, plan="tp=2,pp=2,dp=4",
                                        micro_batch=1, global_batch=64, seq_len=2048)))


def test_search_reads_at_80_columns_and_names_the_bottleneck_once(small_search) -> None:
    items = rc.search_tables(small_search)
    _check(items)
    text = "\n".join(line for item in items for line in _lines(item, 80))
    assert " ".join(text.split()).count("relieve with") == 1                 # the full sentence once, for the best plan
    best = small_search.plans[0]
    wide = "\n".join(line for item in items for line in _lines(item, 160))
    assert best.bottleneck_tag in wide                     # and a tag per row where there is room
    assert "GPUs" in text                                  # the cost objective ranks over GPU counts


def test_search_table_uses_a_wide_terminal(small_search) -> None:
    fit = next(i for i in rc.search_tables(small_search) if isinstance(i, rc.Fit))
    assert len(fit.shown(200)) == len(fit.columns) > len(fit.shown(60))


def test_bottleneck_tag_names_the_largest_overhead() -> None:
    job = make_training_job("gpt3-1.3b", gpu="a100-80gb", num_gpus=16, plan="tp=2,pp=8,dp=1,sp=1,zero=1",
                            micro_batch=1, global_batch=8, seq_len=2048)
    assert bottleneck_tag(predict_job(job)).startswith("bubble ")
    p = predict("gpt3-125m", gpu="h100", num_gpus=8, plan="tp=1,dp=8", micro_batch=4, global_batch=256,
                seq_len=2048)
    assert bottleneck_tag(p).startswith("compute ")


def test_validate_goodput_sim_read_at_80_columns() -> None:
    from clustertwin.reliability import estimate_goodput
    from clustertwin.sim import simulate
    from clustertwin.validate import read_runs, validate_rows
    rep = validate_rows(read_runs(DATA / "moe_public_runs.csv"))
    _check(rc.validation_tables(rep))
    pred = predict("gpt3-1.3b", gpu="a100-80gb", num_gpus=16, plan="tp=2,pp=2,dp=4", micro_batch=1,
                   global_batch=64, seq_len=2048)
    _check(rc.goodput_tables(pred, estimate_goodput(pred, 1e10, monte_carlo_runs=20)))
    res = simulate(pred.job, slow_rank=1, slowdown=1.2)
    _check(rc.sim_tables(res, pred.step_time_s))


# ---- progress ------------------------------------------------------------------------------------
def test_search_progress_counts_every_plan_priced() -> None:
    seen: list[tuple[int, int]] = []
    r = search("gpt3-125m", gpu="a100-80gb", num_gpus=16, global_batch=16, top=2, pareto_points=2,
               progress=lambda done, total: seen.append((done, total)))
    totals = {t for _, t in seen}
    assert len(totals) == 1 and seen[0][0] == 0
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == totals.pop()
    main_size = r.evaluated - sum(v for k, v in r.pruned.items() if k != "memory")
    assert done[-1] > main_size                     # the Pareto view's smaller size counted in


def test_progress_never_on_stdout(capsys) -> None:
    """Under pytest stderr is no terminal: nothing but the JSON on stdout, nothing on stderr."""
    assert main(["search", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "8", "--global-batch", "8",
                 "--top", "1", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["schema"] == 1 and err == ""


def test_progress_bar_draws_on_a_terminal_stderr_only() -> None:
    import io
    from clustertwin.progress import progress_bar
    buf = io.StringIO()
    term = Console(file=buf, force_terminal=True, width=80)
    with progress_bar("pricing plans", console=term) as update:
        update(5, 10)
    assert "pricing plans" in buf.getvalue() and "5/10" in buf.getvalue()
    buf2 = io.StringIO()
    with progress_bar("x", console=Console(file=buf2, force_terminal=True), quiet=True) as update:
        update(1, 2)
    with progress_bar("x", console=Console(file=buf2, force_terminal=False)) as update:
        update(1, 2)
    assert buf2.getvalue() == ""


# ---- compare -------------------------------------------------------------------------------------
def test_compare_plans_on_one_job_with_deltas() -> None:
    c = compare(JobOptions(model="gpt3-125m", gpu="a100-80gb", num_gpus=8, seq_len=1024),
                plans=["tp=1,dp=8", "tp=2,dp=4", "tp=4,dp=2"])
    assert c.varies == "plan" and len(c.rows) == 3
    assert {r.job.plan.global_batch for r in c.rows} == {256}          # the same batch in every row
    assert c.rows[0].delta("step_time_s") == 0.0
    r = c.rows[2]
    assert r.delta("step_time_s") == pytest.approx(r.prediction.step_time_s / c.rows[0].prediction.step_time_s - 1)
    alone = predict("gpt3-125m", gpu="a100-80gb", num_gpus=8, plan="tp=2,dp=4", global_batch=256, seq_len=1024)
    assert c.rows[1].prediction.step_time_s == alone.step_time_s        # predict's own answer
    _check(rc.compare_tables(c))


def test_compare_clusters_cli_json(capsys) -> None:
    code = main(["compare", "-m", "gpt3-125m", "-n", "16", "--gpu", "h100", "--gpu", "a100-80gb",
                 "--plan", "tp=2", "--seq-len", "1024", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["schema"] == 1 and d["baseline"] == 0 and d["varies"] == "cluster"
    assert [r["gpu"] for r in d["rows"]] == ["h100-sxm", "a100-80gb"]
    assert d["rows"][0]["delta"]["step_time_s"] == 0 and d["rows"][1]["delta"]["step_time_s"] > 0
    assert {r["plan"]["tp"] for r in d["rows"]} == {2}


def test_compare_holds_one_global_batch(capsys) -> None:
    c = compare(JobOptions(model="gpt3-125m", num_gpus=8), plans=["tp=1,gb=64", "tp=2"])
    assert [r.job.plan.global_batch for r in c.rows] == [64, 64]
    code = main(["compare", "-m", "gpt3-125m", "-n", "8", "-p", "tp=1,gb=64", "-p", "tp=2,gb=128"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: global_batch:") and "--global-batch" in err


def test_compare_table(capsys) -> None:
    assert main(["compare", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "8", "-p", "tp=1", "-p", "tp=2"]) == 0
    out = capsys.readouterr().out
    assert "base" in out and "tp=2" in out and "against #1" in out


@pytest.mark.parametrize("args", [
    ["-p", "tp=2"],                                                    # one is no comparison
    ["-p", "tp=1", "-p", "tp=2", "--gpu", "h100", "--gpu", "a100-80gb"],   # two things vary
    [arg for i in range(9) for arg in ("-p", f"tp={2 ** (i % 4)},pp={i + 1}")],   # more than eight
])
def test_compare_refuses_in_one_line(args, capsys) -> None:
    code = main(["compare", "-m", "gpt3-125m", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: compare:") and err.count("\n") == 1


# ---- the Python API prints short ----------------------------------------------------------------
def test_results_print_as_short_summaries(small_search) -> None:
    p = small_search.plans[0]
    assert p.plan is p.prediction.graph.plan and p.plan.tp >= 1
    for obj in (p.prediction, p, small_search):
        assert len(str(obj).splitlines()) <= 6 and len(repr(obj)) < 400 and len(str(obj)) < 1500
    assert "step" in str(p.prediction) and p.bottleneck_tag in str(p)
