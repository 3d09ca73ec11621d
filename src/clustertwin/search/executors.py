"""Where the cells of a sweep run: local processes (default) or a Ray cluster (the ``[ray]`` extra).

An executor maps a function over items and yields ``(item, result)`` as each finishes, in any
order; results come back to the caller, which writes them (so a Ray worker need not share the
caller's disk). Functions and items must be picklable: module-level functions, plain data.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator

from ..errors import SpecError

EXECUTORS = ("local", "ray")


class LocalExecutor:
    """A pool of local processes (``workers`` of them; one runs in this process)."""

    def __init__(self, workers: int | None = None):
        if workers is not None and workers < 1:
            raise SpecError("workers", f"{workers} must be at least 1", "give --workers 1 or more")
        self.workers = workers or os.cpu_count() or 1

    def map_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        items = list(items)
        if self.workers == 1 or len(items) <= 1:
            for item in items:
                yield item, fn(item)
            return
        # spawn: workers start clean (no inherited threads or locks), whatever the caller holds
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(self.workers, len(items)), mp_context=ctx) as pool:
            pending = {pool.submit(fn, item): item for item in items}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield pending.pop(fut), fut.result()


class RayExecutor:
    """Tasks on a Ray cluster: ``address`` to join one, else the one this process already started
    (``ray.init``), else a local one started here and shut down when the map ends."""

    def __init__(self, address: str | None = None):
        import importlib.util
        if importlib.util.find_spec("ray") is None:
            raise SpecError("executor", "ray is not installed", "pip install 'clustertwin[ray]' or use --executor local")
        self.address = address

    def map_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        import ray
        started = False
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
            started = True
        try:
            task = ray.remote(fn)
            pending = {task.remote(item): item for item in items}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield pending.pop(ref), ray.get(ref)
        finally:
            if started:
                ray.shutdown()


def make_executor(name: str, workers: int | None = None, ray_address: str | None = None):
    if name == "local":
        return LocalExecutor(workers)
    if name == "ray":
        return RayExecutor(ray_address)
    raise SpecError("executor", f"unknown executor {name!r}", f"use one of {', '.join(EXECUTORS)}")
