"""One exception hierarchy for everything clustertwin reports to a user.

Every error names the field that is wrong, what is wrong with it, and how to fix it; the CLI
prints ``error: <field>: <problem>; <fix>`` on one line and exits with code 2.
"""
from __future__ import annotations


class ClusterTwinError(Exception):
    """Base class: a problem with the user's input or data, never a bug."""

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = f"{self.field}: {self.problem}" if self.field else self.problem
        if self.fix:
            text += f"; {self.fix}"
        return " ".join(text.split())  # never more than one line


class SpecError(ClusterTwinError):
    """A model, GPU, node or cluster description is missing, malformed or absurd."""


class PlanError(ClusterTwinError):
    """A parallel plan that does not divide the model or the cluster, or does not fit."""


class DataError(ClusterTwinError):
    """A data file (validation CSV, profile, config) that cannot be read."""


class UnitError(SpecError):
    """A quantity such as "80GB" or "400Gbps" that cannot be parsed."""
