"""What the command line imports to start (docs/performance.md, "Start-up"): which modules, never how long.

`clustertwin predict` imports the pricing core, the catalog, the prediction's tables and nothing of
search, validation, calibration fits, serving, reliability, export or the optional dependencies;
importing the command line itself (and `--version`) loads neither numpy nor pydantic nor the specs.
A module newly imported by `predict` must be added to PREDICT_MODULES on purpose: every one costs
start-up time.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# the package's modules `clustertwin predict` (the default job) may import
PREDICT_MODULES = {
    "clustertwin", "clustertwin.errors", "clustertwin.cli", "clustertwin.cli_options", "clustertwin.jobs",
    "clustertwin.arith", "clustertwin.constants", "clustertwin.units", "clustertwin.catalog", "clustertwin.predict",
    "clustertwin.specs", "clustertwin.specs.framework", "clustertwin.specs.hardware", "clustertwin.specs.job",
    "clustertwin.specs.model", "clustertwin.specs.nccl", "clustertwin.specs.plan",
    "clustertwin.parallel", "clustertwin.parallel.layout", "clustertwin.parallel.rules",
    "clustertwin.workload", "clustertwin.workload.graph", "clustertwin.workload.moe", "clustertwin.workload.ops",
    "clustertwin.workload.transformer",
    "clustertwin.cost", "clustertwin.cost.compute", "clustertwin.cost.network", "clustertwin.cost.power",
    "clustertwin.cost.profile",
    "clustertwin.schedule", "clustertwin.schedule.batch", "clustertwin.schedule.groups", "clustertwin.schedule.memory",
    "clustertwin.schedule.step", "clustertwin.schedule.stragglers",
    "clustertwin.power", "clustertwin.power.energy",
    "clustertwin.calibrate", "clustertwin.calibrate.bands", "clustertwin.calibrate.profile",
    "clustertwin.report", "clustertwin.report.console",
}
# third-party packages no start-up needs (the optional ones and heavy libraries)
NEVER = {"torch", "plotly", "pyarrow", "ray", "duckdb", "chakra", "pandas", "scipy", "matplotlib"}

_SCRIPT = textwrap.dedent("""
    import contextlib, io, json, sys
    from clustertwin.cli import main
    loaded_by_cli = sorted(sys.modules)
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(sys.argv[1:])
    print(json.dumps({"cli": loaded_by_cli, "after": sorted(sys.modules), "rc": rc}))
""")


def _modules(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_predict_imports_only_what_a_prediction_needs() -> None:
    res = _modules("predict")
    assert res["rc"] == 0
    ours = {m for m in res["after"] if m.split(".")[0] == "clustertwin"}
    assert ours - PREDICT_MODULES == set(), "new imports on `clustertwin predict`'s path (each costs start-up time)"
    assert {"clustertwin.predict", "clustertwin.schedule.batch", "clustertwin.report.console"} <= ours
    assert not {m.split(".")[0] for m in res["after"]} & NEVER


def test_the_command_line_loads_no_pricing_core_before_it_knows_the_command() -> None:
    res = _modules("--version")
    assert res["rc"] == 0
    assert not {m.split(".")[0] for m in res["cli"]} & {"numpy", "pydantic", "yaml", "rich"}
    assert "rich" not in {m.split(".")[0] for m in res["after"]}   # --version prints no table
    for loaded in (res["cli"], res["after"]):   # (typer itself imports pydantic where it is installed)
        assert not {m.split(".")[0] for m in loaded} & ({"numpy", "yaml"} | NEVER)
        assert not {m for m in loaded if m.startswith(("clustertwin.specs", "clustertwin.predict",
                                                           "clustertwin.catalog", "clustertwin.schedule"))}


def test_predict_json_imports_no_rich_and_tables_import_it() -> None:
    """rich renders the tables only: `predict --json` (and the other built-ins' --json) never imports it
    nor the tables' module; `predict` with its usual flags prints tables through it."""
    res = _modules("predict", "-m", "gpt3-175b", "--gpu", "a100-80gb", "-n", "1024", "-p", "tp=8,pp=16,dp=8,sp=1",
                   "--global-batch", "1536", "--seq-len", "2048", "--power-cap", "300W", "--json")
    assert res["rc"] == 0
    loaded = {m.split(".")[0] for m in res["after"]}
    assert "rich" not in loaded and "clustertwin.report.console" not in res["after"]
    assert not loaded & NEVER and {"numpy", "pydantic"} <= loaded
    for args in (("describe", "--json"), ("list", "gpus", "--json")):
        res = _modules(*args)
        assert res["rc"] == 0 and "rich" not in {m.split(".")[0] for m in res["after"]}, args
    res = _modules("predict", "-m", "gpt3-175b", "--gpu", "a100-80gb", "-n", "1024", "-p", "tp=8,pp=16,dp=8,sp=1")
    assert res["rc"] == 0
    assert {"rich.console", "rich.table", "clustertwin.report.console"} <= set(res["after"])
    assert not {m.split(".")[0] for m in res["after"]} & NEVER


def test_the_console_script_predict_json_imports_no_rich() -> None:
    """The same through the console script's entry point (``run()``: the garbage-collector pause and the
    environment defaults), as `clustertwin predict --json` starts."""
    code = textwrap.dedent("""
        import atexit, json, sys
        atexit.register(lambda: sys.stderr.write("MODULES " + json.dumps(sorted(sys.modules)) + "\\n"))
        sys.argv = ["clustertwin", "predict", "--json"]
        from clustertwin.cli import run
        run()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["schema"] == 1
    mods = json.loads(out.stderr.rsplit("MODULES ", 1)[1])
    assert not {m.split(".")[0] for m in mods} & (NEVER | {"rich", "yaml"})
    assert {m for m in mods if m.split(".")[0] == "clustertwin"} <= PREDICT_MODULES


def test_the_api_names_load_on_first_use_and_stay_functions() -> None:
    """The package imports its API lazily; ``clustertwin.predict`` is the function even after the
    submodule of the same name was imported by something else (the command line does)."""
    code = textwrap.dedent("""
        import sys
        import clustertwin
        assert "clustertwin.predict" not in sys.modules
        import clustertwin.predict as via_submodule_import   # binds the package attribute, as before
        from clustertwin import Prediction, make_training_job, predict, predict_job
        assert callable(predict) and predict is clustertwin.predict and via_submodule_import is predict
        assert sys.modules["clustertwin.predict"].predict is predict and predict_job.__name__ == "predict_job"
        assert set(clustertwin.__all__) <= set(dir(clustertwin))
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_shipped_parsed_yaml_is_current_and_exact() -> None:
    """catalog/parsed.json holds every YAML file of the package parsed, so that a prediction imports
    no PyYAML; it must match the files (regenerate: python -c "from clustertwin.catalog import
    write_parsed; write_parsed()"; benchmarks/cv_table.py --write does it too)."""
    import yaml

    from clustertwin import catalog
    assert catalog.PARSED_PATH.read_text(encoding="utf-8") == catalog.parsed_text(), \
        "catalog/parsed.json is stale: python -c \"from clustertwin.catalog import write_parsed; write_parsed()\""
    for path in catalog._yaml_files():
        text = path.read_text(encoding="utf-8")
        assert catalog._same(catalog.load_yaml(text), yaml.safe_load(text)), path
    edited = (catalog.CATALOG_DIR / "gpus" / "h100-sxm.yaml").read_text(encoding="utf-8") + "extra: 1\n"
    assert catalog.load_yaml(edited)["extra"] == 1     # text not shipped: parsed, not looked up
    first, second = catalog.load_yaml(text), catalog.load_yaml(text)
    assert first == second and first is not second     # each call gets its own data, as a parse does


def test_predict_reads_no_yaml_parser() -> None:
    res = _modules("predict")
    assert "yaml" not in {m.split(".")[0] for m in res["after"]}, \
        "catalog/parsed.json is stale: python -c \"from clustertwin.catalog import write_parsed; write_parsed()\""
