"""clustertwin: predict, plan and trace distributed LLM training on GPU clusters from specs alone.

The Python API (``predict``, ``predict_job``, ``make_training_job``, ``Prediction``) is imported on first
use, so that ``import clustertwin.cli`` does not import numpy and the whole pricing core before the
command line knows which command runs (``clustertwin --version`` and ``--help`` need none of it).
"""
from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from .errors import ClusterTwinError, DataError, PlanError, SpecError, UnitError

if TYPE_CHECKING:
    from .predict import Prediction, make_training_job, predict, predict_job

__version__ = "0.1.0"
__all__ = ["predict", "predict_job", "make_training_job", "Prediction", "ClusterTwinError", "SpecError",
           "PlanError", "DataError", "UnitError", "__version__"]

_API = ("predict", "predict_job", "make_training_job", "Prediction")   # the names clustertwin.predict gives


class _Package(types.ModuleType):
    """The package's module: importing the submodule ``clustertwin.predict`` binds the API's names here
    (``clustertwin.predict`` stays the function, as when the package imported it eagerly)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "predict" and isinstance(value, types.ModuleType):
            for api in _API:
                super().__setattr__(api, getattr(value, api))
            return
        super().__setattr__(name, value)


def __getattr__(name: str) -> Any:
    if name in _API:
        importlib.import_module(".predict", __name__)   # binds the names (_Package.__setattr__)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


sys.modules[__name__].__class__ = _Package
