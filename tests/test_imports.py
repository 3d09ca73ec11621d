"""Every module of the package imports without the optional dependencies.

The doctests (pyproject.toml: --doctest-modules over src/clustertwin) import every module, and the
core must work from the base install. So torch, plotly, ray, pyarrow, duckdb and chakra are imported
inside the functions that use them, never at module level. The test extra installs all of them but
torch, so this test hides them from a fresh interpreter and imports each module there.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

OPTIONAL = ("torch", "plotly", "ray", "pyarrow", "duckdb", "chakra")
# Needs torch to import at all (it subclasses torch.nn.Module); conftest.py leaves it out of the
# doctests when torch is absent, and tests/test_calibrate.py tests it where torch is installed.
NEEDS_TORCH = {"clustertwin.calibrate.torch_model"}
NOT_IMPORTED = {"clustertwin.__main__"}   # runs the CLI on import

_SCRIPT = textwrap.dedent("""
    import importlib, importlib.abc, importlib.util, json, pathlib, sys

    blocked, skip = set(sys.argv[1].split(",")), set(sys.argv[2].split(","))

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
            return None

    sys.meta_path.insert(0, Block())
    root = pathlib.Path(importlib.util.find_spec("clustertwin").submodule_search_locations[0])
    names = sorted(".".join(("clustertwin",) + p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
                   for p in root.rglob("*.py"))
    failed = {}
    for name in names:
        if name in skip:
            continue
        try:
            importlib.import_module(name)
        except Exception as e:  # report every module that fails, not only the first
            failed[name] = f"{type(e).__name__}: {e}"
    print(json.dumps({"imported": [n for n in names if n not in skip], "failed": failed,
                      "loaded": sorted({k.split(".")[0] for k in sys.modules} & blocked)}))
""")


def test_every_module_imports_without_the_optional_dependencies() -> None:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, ",".join(OPTIONAL), ",".join(NEEDS_TORCH | NOT_IMPORTED)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["failed"] == {}
    assert res["loaded"] == []
    assert {"clustertwin", "clustertwin.predict", "clustertwin.cli", "clustertwin.report.views",
            "clustertwin.search.sweep", "clustertwin.export.chakra"} <= set(res["imported"])
