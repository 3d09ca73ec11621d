"""The clustertwin command line: describe, list, predict, compare, validate.

Every user mistake ends as one line on stderr, ``error: <field>: <problem>; <fix>``, and exit
code 2; ``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

try:  # typer >= 0.20 vendors click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older typer on top of click
    from click import exceptions as click_exc

from . import __version__
from .errors import ClusterTwinError

app = typer.Typer(add_completion=False, no_args_is_help=False, rich_markup_mode=None,
                  help="Predict, plan and trace distributed LLM training on GPU clusters from specs alone.")
_state = {"debug": False}
_CONSOLE: list = []   # the stdout console, made on first use: rich is imported only by a command that prints a table


def _console():
    """The command line's rich console on stdout (one per process). A command that prints JSON never
    makes it, so ``--json`` runs import no rich (~20 ms of start-up on the 2-core machine)."""
    if not _CONSOLE:
        from rich.console import Console
        _CONSOLE.append(Console())
    return _CONSOLE[0]


def __getattr__(name: str):
    if name == "console":   # ``from clustertwin.cli import console`` (the subpackages' commands)
        return _console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Kind(str, Enum):
    models = "models"
    gpus = "gpus"
    nodes = "nodes"
    clusters = "clusters"


def _emit_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=float) + "\n")


@app.callback(invoke_without_command=True)
def _main(ctx: typer.Context,
          debug: bool = typer.Option(False, "--debug", help="show tracebacks instead of one-line errors"),
          version: bool = typer.Option(False, "--version", help="print the version and exit")) -> None:
    _state["debug"] = debug
    if version:
        typer.echo(f"clustertwin {__version__}")
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


# ---- shared options ---------------------------------------------------------------------------
from .cli_options import ClusterOpt, GpnOpt, GpuOpt, ModelOpt, NumGpusOpt, job_options  # noqa: E402
from .jobs import JobOptions  # noqa: E402


@app.command()
def describe(model: Optional[str] = ModelOpt, gpu: Optional[str] = GpuOpt, num_gpus: Optional[int] = NumGpusOpt,
             gpus_per_node: Optional[int] = GpnOpt, cluster: Optional[str] = ClusterOpt,
             as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Describe a model and a cluster: parameters, FLOPs, peaks, memory and links."""
    from .catalog import load_model
    from .jobs import DEFAULT_MODEL, resolve_cluster
    m = load_model(model or DEFAULT_MODEL)
    c = resolve_cluster(gpu, num_gpus, cluster, gpus_per_node)
    if as_json:
        _emit_json({"schema": 1, "model": {**m.model_dump(), **m.summary()},
                    "cluster": {**c.model_dump(), "num_gpus": c.num_gpus}})
        return
    from .report.console import cluster_table, model_table
    console = _console()
    console.print(model_table(m))
    console.print(cluster_table(c))


@app.command("list")
def list_cmd(kind: Kind = typer.Argument(..., help="models, gpus, nodes or clusters"),
             wide: bool = typer.Option(False, "--wide", help="full sources (wrapped), not their first clause"),
             as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """List the catalog's presets and their sources."""
    from .catalog import list_presets
    rows = list_presets(kind.value)
    if as_json:
        _emit_json(rows)
        return
    from .report.console import catalog_table
    _console().print(catalog_table(kind.value, rows, wide=wide))


@app.command()
@job_options(profile=True)
def predict(job: JobOptions, profile: Optional[Path],
            power_cap: Optional[str] = typer.Option(None, "--power-cap", help='GPU power limit, e.g. "500W"'),
            clock: Optional[str] = typer.Option(None, "--clock", help='locked SM clock, e.g. "1410MHz"'),
            as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
    """Predict one training iteration: step time and its breakdown, memory per GPU, tokens/s, MFU,
    energy and average power."""
    from .jobs import job_from_options
    from .power.energy import job_with_power, parse_power_flags
    from .predict import predict_job
    pred = predict_job(job_with_power(job_from_options(job), *parse_power_flags(power_cap, clock)), profile)
    if as_json:
        _emit_json(pred.to_json())
        return
    from .report.console import prediction_tables, print_all
    print_all(_console(), prediction_tables(pred))


@app.command()
@job_options(repeat=("plan", "cluster", "gpu"))
def compare(job: JobOptions, repeated: dict,
            as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
    """Two to eight plans (repeat --plan) or clusters (repeat --cluster or --gpu) side by side on the
    same job and global batch, with each one's difference from the first."""
    from .compare import compare as run_compare
    c = run_compare(job, plans=repeated["plan"], clusters=repeated["cluster"], gpus=repeated["gpu"])
    if as_json:
        _emit_json(c.to_json())
        return
    from .report.console import compare_tables, print_all
    print_all(_console(), compare_tables(c))


@app.command()
def validate(files: list[Path] = typer.Argument(..., help="CSVs of measured runs in the validation schema"),
             cv: Optional[str] = typer.Option(None, "--cv", help="'source': judge each source's rows with a profile "
                                              "calibrated on the other sources' rows (leave-one-source-out)"),
             as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
    """Predict every measured run in FILES and report the error per row and the MAPE; with --cv source,
    out of sample."""
    from .errors import DataError
    from .validate import read_runs, validate_rows
    from .validate.serving import is_serving_csv
    serving = [is_serving_csv(f) for f in files]
    if any(serving):   # the serving schema (columns engine and workload): the serving twin predicts it
        if not all(serving):
            raise DataError("files", "serving and training files given together", "validate them separately")
        from .serve.cli import validate_serving_files
        validate_serving_files(files, cv=cv, as_json=as_json)
        return
    rows, names = [], []
    for f in files:
        r = read_runs(f)
        rows += r
        names += [f.name] * len(r)
    if cv is None:
        rep = validate_rows(rows)
        if as_json:
            _emit_json(rep.to_json())
            return
        from .report.console import print_all, validation_tables
        print_all(_console(), validation_tables(rep))
        return
    if cv.strip().lower() != "source":
        raise DataError("cv", f"unknown grouping {cv!r}", "use --cv source (leave-one-source-out)")
    from .validate.compare import cross_validate
    res = cross_validate(rows, names)
    if as_json:
        _emit_json(res.to_json())
        return
    from .report.console import print_all, validation_tables
    print_all(_console(), validation_tables(res.report, res))


# ---- commands of the subpackages: each module defines register(app) ----------------------------
# (one line per subpackage; keep this block sorted)
_SUBCOMMAND_MODULES: list[str] = [
    "clustertwin.calibrate.cli",
    "clustertwin.cluster.cli",
    "clustertwin.export.cli",
    "clustertwin.power.cli",
    "clustertwin.profiler.cli",
    "clustertwin.reliability.cli",
    "clustertwin.report.cli",
    "clustertwin.search.cli",
    "clustertwin.serve.cli",
]


# The commands each module defines, so that running one imports only its module (a command not
# listed here, --help, or no command registers them all).
_COMMANDS_OF: dict[str, tuple[str, ...]] = {
    "clustertwin.calibrate.cli": ("calibrate", "measure"),
    "clustertwin.cluster.cli": ("place", "collective"),
    "clustertwin.export.cli": ("trace", "trace-expand", "sim"),
    "clustertwin.power.cli": ("energy", "heat"),
    "clustertwin.profiler.cli": ("compare-trace",),
    "clustertwin.reliability.cli": ("goodput",),
    "clustertwin.report.cli": ("report",),
    "clustertwin.search.cli": ("search", "sweep"),
    "clustertwin.serve.cli": ("serve", "serve-search"),
}
_BUILTIN_COMMANDS = ("describe", "list", "predict", "compare", "validate")
# The modules a built-in command imports when it runs, imported before it runs (``_load_command``);
# the tables' module (and rich with it) only where the command prints tables, not with --json.
_IMPORTS_OF: dict[str, tuple[str, ...]] = {
    "describe": ("clustertwin.jobs", "clustertwin.report.console"),
    "list": ("clustertwin.catalog", "clustertwin.report.console"),
    "predict": ("clustertwin.jobs", "clustertwin.power.energy", "clustertwin.predict", "clustertwin.report.console"),
    "compare": ("clustertwin.compare", "clustertwin.report.console"),
    "validate": ("clustertwin.validate", "clustertwin.report.console"),
}
_registered: set[str] = set()


def _register_subcommands(command: str = "") -> None:
    """Register the subpackages' commands: only the one ``command`` needs when it is known."""
    if command in _BUILTIN_COMMANDS or command == "--version":
        return
    import importlib
    owners = [m for m in _SUBCOMMAND_MODULES if command and command in _COMMANDS_OF.get(m, ())]
    for name in owners or _SUBCOMMAND_MODULES:
        if name not in _registered:
            importlib.import_module(name).register(app)
            _registered.add(name)


_TABLES_MODULE = "clustertwin.report.console"


def _load_command(command: str, tables: bool = True) -> None:
    """Import what ``command`` needs. Run from the console script, the garbage collector is paused
    while they load (run()): the objects of a module load live as long as the process, and the
    collections the allocations would trigger find nothing to free (~5% of `predict`'s start).
    The loaded objects are then frozen out of later collections and the collector resumes."""
    import gc
    import importlib
    try:
        _register_subcommands(command)
        for name in _IMPORTS_OF.get(command, ()):
            if tables or name != _TABLES_MODULE:
                importlib.import_module(name)
    finally:
        if _state.get("gc_paused"):
            _state["gc_paused"] = False
            gc.freeze()
            gc.enable()


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turning every user error into one line and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    _state["debug"] = "--debug" in args
    command = _cmd(args)
    registered = app.registered_commands
    try:
        version_only = not command and "--version" in args and "--help" not in args
        _load_command("--version" if version_only else command,   # --version needs no command registered
                      tables="--json" not in args)
        if command in _BUILTIN_COMMANDS:   # typer builds a click command of each one registered: only this one
            app.registered_commands = [c for c in registered if _command_name(c) == command]
        app(args=args, prog_name="clustertwin", standalone_mode=False)
        return 0
    except ClusterTwinError as e:
        if _state["debug"]:
            raise
        sys.stderr.write(f"error: {e.one_line()}\n")
        return 2
    except click_exc.NoSuchOption as e:
        sys.stderr.write(f"error: {e.option_name}: no such option; see `clustertwin {_cmd(args)} --help`\n")
        return 2
    except click_exc.MissingParameter as e:
        name = e.param.name if e.param is not None else "argument"
        sys.stderr.write(f"error: {name}: missing; see `clustertwin {_cmd(args)} --help`\n")
        return 2
    except click_exc.BadParameter as e:
        name = e.param.opts[0] if e.param is not None and getattr(e.param, "opts", None) else (e.param_hint or "argument")
        sys.stderr.write(f"error: {_one_line(name)}: {_one_line(e.message)}; see `clustertwin {_cmd(args)} --help`\n")
        return 2
    except click_exc.UsageError as e:
        sys.stderr.write(f"error: {_one_line(e.format_message())}; see `clustertwin --help`\n")
        return 2
    except typer.Abort:
        sys.stderr.write("error: aborted\n")
        return 130
    except (typer.Exit, SystemExit) as e:
        return int(getattr(e, "exit_code", getattr(e, "code", 0)) or 0)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:  # output piped into a command that stopped reading (e.g. head)
        _silence_stdout()
        return 0
    finally:
        app.registered_commands = registered


def _command_name(info) -> str:
    """The name typer gives a registered command (its own, or the function's with '-' for '_')."""
    return info.name or info.callback.__name__.lower().replace("_", "-")


def _cmd(args: list[str]) -> str:
    for a in args:
        if not a.startswith("-"):
            return a
    return ""


def run() -> None:  # pragma: no cover - console script shim
    import os
    # OpenBLAS (under numpy) starts a thread per core when numpy is imported, which costs more start-up
    # time than any command gains: the BLAS calls of the package (calibrate's small solves) are tiny.
    # A value the user set wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # pydantic looks for plugins in every installed distribution's entry points when it builds the
    # first model; the command line has no use for them (set PYDANTIC_DISABLE_PLUGINS= to keep them).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    import gc
    if gc.isenabled():   # resumed once the command's modules are loaded (_load_command)
        gc.disable()
        _state["gc_paused"] = True
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # stdout closed early (| head): not an error of ours
        _silence_stdout()
        code = 0
    sys.exit(code)


def _silence_stdout() -> None:
    import os
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
