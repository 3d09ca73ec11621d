"""clustertwin: predict, plan and trace distributed LLM training on GPU clusters from specs alone."""
from .errors import ClusterTwinError, DataError, PlanError, SpecError, UnitError
from .predict import Prediction, make_training_job, predict, predict_job

__version__ = "0.1.0"
__all__ = ["predict", "predict_job", "make_training_job", "Prediction", "ClusterTwinError", "SpecError",
           "PlanError", "DataError", "UnitError", "__version__"]
