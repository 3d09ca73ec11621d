"""Search: the best parallel plans for a job (``search``), and sweeps of searches (``sweep``)."""
from .space import PRUNE_REASONS, SearchSpace, make_space
from .tuner import OBJECTIVES, ParetoPoint, RankedPlan, SearchResult, bottleneck, search

__all__ = ["search", "SearchResult", "RankedPlan", "ParetoPoint", "bottleneck", "SearchSpace", "make_space",
           "PRUNE_REASONS", "OBJECTIVES"]
