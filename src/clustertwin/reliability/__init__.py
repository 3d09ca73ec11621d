"""reliability: failures, checkpoints, restarts and stragglers turn a step time into time-to-train.

>>> from clustertwin import predict
>>> from clustertwin.reliability import estimate_goodput
>>> g = estimate_goodput(predict("llama3-8b", gpu="h100", num_gpus=64), 1e12, mtbf_s=6 * 3600)
>>> g.expected_time_to_train_s > g.ideal_time_to_train_s and 0 < g.goodput < 1
True
"""
from .checkpoint import CheckpointConfig, CheckpointCosts, checkpoint_costs
from .failures import COMPONENTS, PRESETS, FailureModel, load_failure_model
from .goodput import GoodputEstimate, GoodputOptions, daly_interval_s, estimate_goodput, young_interval_s
from .fleets import FLEETS, Fleet, FailSlow, load_fleet
from .montecarlo import simulate
from .policies import COMPARED, POLICIES, PolicyEffects, PolicyResult, compare_policies, parse_policy
from .recovery import RecoveryParts, init_time_s
from .stragglers import StragglerModel, expected_group_slowdown, expected_step_slowdown, slow_node_impact

__all__ = ["estimate_goodput", "GoodputEstimate", "GoodputOptions", "FailureModel", "load_failure_model",
           "PRESETS", "COMPONENTS", "CheckpointConfig", "CheckpointCosts", "checkpoint_costs", "StragglerModel",
           "expected_group_slowdown", "expected_step_slowdown", "slow_node_impact", "simulate",
           "young_interval_s", "daly_interval_s", "FLEETS", "Fleet", "FailSlow", "load_fleet", "POLICIES", "COMPARED",
           "PolicyEffects", "PolicyResult", "compare_policies", "parse_policy", "RecoveryParts", "init_time_s"]
