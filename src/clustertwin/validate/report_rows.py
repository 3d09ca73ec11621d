"""What every validation report shares: its rows, those predicted (an error) and those not (a reason),
and the mean absolute error over groups of the predicted ones."""
from __future__ import annotations

from typing import Any, Callable, Generic, Optional, Protocol, TypeVar


class _HasError(Protocol):
    @property
    def error(self) -> Optional[float]: ...


R = TypeVar("R", bound=_HasError)


class ErrorRows(Generic[R]):
    """A report of rows each with an ``error`` (None: not predicted). Subclasses are dataclasses with
    a ``rows`` field."""

    rows: list[R]

    @property
    def ok_rows(self) -> list[R]:
        """The predicted rows."""
        return [r for r in self.rows if r.error is not None]

    @property
    def failed_rows(self) -> list[R]:
        """The rows not predicted (each with its reason)."""
        return [r for r in self.rows if r.error is None]

    def _mape_by(self, key: Callable[[R], Any], *, sort: bool = False) -> dict[Any, float]:
        """Mean absolute error of the predicted rows grouped by ``key(row)`` (in first-seen order, or sorted)."""
        groups: dict[Any, list[float]] = {}
        for r in self.ok_rows:
            groups.setdefault(key(r), []).append(abs(r.error))   # type: ignore[arg-type]
        items = sorted(groups.items()) if sort else list(groups.items())
        return {k: sum(v) / len(v) for k, v in items}
