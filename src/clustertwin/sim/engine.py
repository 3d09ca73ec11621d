"""A small discrete-event engine: tasks on per-rank streams, with dependencies, collectives that start
only when every member is ready, and links shared by the transfers crossing them.

- A *stream* runs its tasks one at a time in the order they were added (a CUDA stream, an NCCL
  communicator's stream).
- A task may sit on several streams at once: a collective occupies the stream of each member and
  starts when it is at the head of all of them and all its dependencies are done, i.e. when the
  whole group is ready.
- A communication task first waits its latency, then moves ``work`` seconds' worth of bytes (its
  time alone on the links) over its links. Transfers in flight on one link share it equally
  (processor sharing); a transfer crossing several links goes at the pace of its busiest link.

>>> e = Engine()
>>> a = e.add((e.stream("r0", "compute"),), 2.0)
>>> b = e.add((e.stream("r1", "compute"),), 3.0)
>>> ar = e.add((e.stream("r0", "tp"), e.stream("r1", "tp")), 1.0, deps=(a, b))   # waits for both
>>> e.run()
4.0
>>> e.start[ar], e.end[ar]
(3.0, 4.0)
"""
from __future__ import annotations

import heapq
from typing import Hashable, Iterable, Sequence

_START, _XFER, _END = 0, 1, 2


class Engine:
    """Tasks are integers; add them (with their dependencies, which must already exist, or be
    added later with :meth:`depend`), then :meth:`run`. ``start``/``end`` hold each task's times."""

    def __init__(self) -> None:
        self._stream_ids: dict[Hashable, int] = {}
        self._stream_tail: list[int] = []
        self._link_ids: dict[Hashable, int] = {}
        self.work: list[float] = []          # compute duration, or transfer work (s) of a comm task
        self.latency: list[float] = []
        self.links: list[tuple[int, ...]] = []
        self._wait: list[int] = []
        self._succ: list[list[int]] = []
        self.start: list[float] = []
        self.end: list[float] = []

    # ---- building --------------------------------------------------------------------------
    def stream(self, *key: Hashable) -> int:
        sid = self._stream_ids.get(key)
        if sid is None:
            sid = self._stream_ids[key] = len(self._stream_tail)
            self._stream_tail.append(-1)
        return sid

    def link(self, *key: Hashable) -> int:
        lid = self._link_ids.get(key)
        if lid is None:
            lid = self._link_ids[key] = len(self._link_ids)
        return lid

    def add(self, streams: Sequence[int], work: float, deps: Iterable[int] = (), latency: float = 0.0,
            links: tuple[int, ...] = ()) -> int:
        """A task on ``streams`` (after the tasks already there) that starts once ``deps`` are done."""
        tid = len(self.work)
        succ = self._succ
        wait = 0
        for d in deps:
            succ[d].append(tid)
            wait += 1
        tail = self._stream_tail
        for s in streams:
            prev = tail[s]
            if prev >= 0:
                succ[prev].append(tid)
                wait += 1
            tail[s] = tid
        self.work.append(max(0.0, work))
        self.latency.append(max(0.0, latency))
        self.links.append(links)
        self._wait.append(wait)
        succ.append([])
        return tid

    def depend(self, task: int, on: int) -> None:
        """Make ``task`` wait for ``on`` as well (both already added)."""
        self._succ[on].append(task)
        self._wait[task] += 1

    def __len__(self) -> int:
        return len(self.work)

    # ---- running ---------------------------------------------------------------------------
    def run(self) -> float:
        """Run every task; returns the time the last one ends. Raises RuntimeError on a cycle."""
        n = len(self.work)
        self.start = [0.0] * n
        self.end = [0.0] * n
        wait = list(self._wait)
        succ, work, latency, links = self._succ, self.work, self.latency, self.links
        heap: list[tuple[float, int, int, int, int]] = []
        seq = 0
        n_links = len(self._link_ids)
        active: list[set[int]] = [set() for _ in range(n_links)]
        remaining: dict[int, float] = {}
        rate: dict[int, float] = {}
        since: dict[int, float] = {}
        version: dict[int, int] = {}
        done = 0
        push, pop = heapq.heappush, heapq.heappop

        def reshare(now: float, touched: Iterable[int]) -> None:
            nonlocal seq
            flows: set[int] = set()
            for lk in touched:
                flows |= active[lk]
            for f in flows:
                remaining[f] -= (now - since[f]) * rate[f]
                since[f] = now
                r = 1.0 / max(len(active[lk]) for lk in links[f])
                rate[f] = r
                version[f] += 1
                seq += 1
                push(heap, (now + max(0.0, remaining[f]) / r, seq, _END, f, version[f]))

        for t in range(n):
            if wait[t] == 0:
                seq += 1
                push(heap, (0.0, seq, _START, t, 0))
        while heap:
            now, _, kind, t, ver = pop(heap)
            if kind == _START:
                self.start[t] = now
                if links[t] and work[t] > 0.0:
                    seq += 1
                    push(heap, (now + latency[t], seq, _XFER, t, 0))
                else:
                    seq += 1
                    push(heap, (now + latency[t] + work[t], seq, _END, t, -1))
                continue
            if kind == _XFER:
                remaining[t] = work[t]
                since[t] = now
                rate[t] = 1.0
                version[t] = 0
                alone = True
                for lk in links[t]:
                    act = active[lk]
                    if act:
                        alone = False
                    act.add(t)
                if alone:  # nobody to share with: full rate, nothing else changes
                    seq += 1
                    push(heap, (now + work[t], seq, _END, t, 0))
                else:
                    reshare(now, links[t])
                continue
            # _END
            if ver >= 0:
                if ver != version.get(t):
                    continue  # superseded by a later share
                shared = False
                for lk in links[t]:
                    act = active[lk]
                    act.discard(t)
                    if act:
                        shared = True
                del remaining[t], rate[t], since[t], version[t]
                if shared:
                    reshare(now, links[t])
            self.end[t] = now
            done += 1
            for s in succ[t]:
                wait[s] -= 1
                if wait[s] == 0:
                    seq += 1
                    push(heap, (now, seq, _START, s, 0))
        if done != n:
            raise RuntimeError(f"{n - done} of {n} tasks never became ready (a dependency cycle)")
        return max(self.end, default=0.0)
