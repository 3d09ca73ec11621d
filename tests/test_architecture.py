"""The package's layering: its parts import each other without cycles, and no part reaches into
another's private names. Commands (``*/cli.py``, ``cli_options.py``) form one layer on top: they
parse, call the Python API and render."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "clustertwin"
_CLI_MODULES = {"cli", "cli_options", "__main__"}


def _part(rel: Path) -> str:
    """The part a module belongs to: its subpackage, or the module itself at the top; commands are 'cli'."""
    if rel.stem in _CLI_MODULES:
        return "cli"
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports() -> list[tuple[str, str, list[str], str]]:
    """(importing part, imported part, names, where) of every import inside the package, lazy ones too."""
    out = []
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG)
        here = list(rel.with_suffix("").parts[:-1])      # the package the module sits in
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "clustertwin":
                target = node.module.split(".")[1:]
            else:
                continue
            names = [a.name for a in node.names]
            if target:
                mod = PKG.joinpath(*target)
                rel_t = Path(*target).with_suffix(".py") if mod.with_suffix(".py").exists() else Path(*target, "x.py")
                parts = [_part(rel_t)]
            else:   # from . import name (a top-level module or subpackage)
                parts = [_part(Path(n + ".py")) if (PKG / (n + ".py")).exists() else n for n in names]
            for p in parts:
                out.append((_part(rel), p, names, f"{rel}:{node.lineno}"))
    return out


def test_no_import_cycle_between_parts() -> None:
    edges: dict[str, set[str]] = {}
    for a, b, _, _ in _imports():
        if a != b:
            edges.setdefault(a, set()).add(b)
    cycles = []
    for start in sorted(edges):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges.get(node, ())):
                if nxt == start:
                    cycles.append(" -> ".join(path + [start]))
                elif nxt not in path and nxt > start:    # report each cycle once, from its smallest part
                    stack.append((nxt, path + [nxt]))
    assert not cycles, "import cycles between parts:\n" + "\n".join(cycles)


def test_no_private_name_imported_across_parts() -> None:
    bad = [f"{where}: {n} from {b}" for a, b, names, where in _imports() if a != b
           for n in names if n.startswith("_") and not n.startswith("__")]
    assert not bad, "private names imported across parts:\n" + "\n".join(bad)


def test_the_core_does_not_import_commands_or_views() -> None:
    core = {"specs", "parallel", "workload", "cost", "schedule", "constants", "arith", "units", "errors"}
    outer = {"cli", "report", "search", "sim", "export", "reliability", "validate", "calibrate", "predict", "jobs"}
    bad = [f"{where}: {a} imports {b}" for a, b, _, where in _imports() if a in core and b in outer]
    assert not bad, "\n".join(bad)
