"""Immutable, validated specs: model, hardware, plan, job."""
from .hardware import ClusterSpec, GPUSpec, NodeSpec
from .job import FRAMEWORKS, TrainingJob, check_plan, make_job, stage_layer_split
from .model import MLASpec, ModelSpec
from .plan import Plan, ResolvedPlan, make_plan, parse_plan

__all__ = ["ClusterSpec", "GPUSpec", "NodeSpec", "TrainingJob", "check_plan", "make_job", "stage_layer_split",
           "MLASpec", "ModelSpec", "Plan", "ResolvedPlan", "make_plan", "parse_plan", "FRAMEWORKS"]
