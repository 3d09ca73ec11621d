"""pytest configuration for the tests and for the docstring examples of src/clustertwin.

pyproject.toml runs pytest with --doctest-modules over src/clustertwin, so pytest imports every
module of the package. Every module imports without its optional dependencies (torch, plotly, ray,
pyarrow, duckdb, chakra are imported inside the functions that use them; tests/test_imports.py checks
this), with one exception: calibrate/torch_model.py defines torch.nn.Module subclasses, so it needs
torch to import at all. The test extra does not install torch (it is the `gpu` extra), so without
torch that module is left out of doctest collection; its tests in tests/test_calibrate.py skip the
same way. With torch installed it is collected like every other module.
"""
from __future__ import annotations

import importlib.util

collect_ignore: list[str] = []
if importlib.util.find_spec("torch") is None:
    collect_ignore.append("src/clustertwin/calibrate/torch_model.py")
