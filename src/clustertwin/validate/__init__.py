"""Measured runs (CSV in the validation schema) and the comparison of predictions against them."""
from .runs import MeasuredRow, job_from_row, read_runs
from .compare import ValidationReport, validate_rows

__all__ = ["MeasuredRow", "job_from_row", "read_runs", "ValidationReport", "validate_rows"]
