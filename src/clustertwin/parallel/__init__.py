"""The parallel layout of a plan, in one place: its degrees and derived sizes (``ParallelDims``),
the process groups and their placement on nodes, the layer split over pipeline chunks, and the one
table of plan rules (``RULES``) that ``check_plan``, the search's pruning and ``validate`` read.

Nothing here imports the rest of clustertwin but ``errors`` and ``arith``: specs, workload, cost,
schedule and search build on it.
"""
from .layout import (GroupPlacement, ParallelDims, expert_dp, expert_dp_size, expert_tp, group_placements,
                     place_group, stage_layer_split)
from .rules import (RULE_NAMES, RULES, STAGES, Capabilities, JobFacts, PlanFacts, Rule, RuleBroken, check_rules,
                    first_broken, first_broken_index, rule, rules_at, rules_markdown, tp_overlap_possible,
                    tp_overlap_without_sp)

__all__ = ["GroupPlacement", "ParallelDims", "expert_dp", "expert_dp_size", "expert_tp", "group_placements",
           "place_group", "stage_layer_split", "RULE_NAMES", "RULES", "STAGES", "Capabilities", "JobFacts",
           "PlanFacts", "Rule", "RuleBroken", "check_rules", "first_broken", "first_broken_index", "rule", "rules_at",
           "rules_markdown", "tp_overlap_possible", "tp_overlap_without_sp"]
