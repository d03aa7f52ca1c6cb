"""SIGHUP with `--workers N`: replace the workers one at a time, each handing its streams on.

For each worker in turn a new process starts with the same command; once it says it is
ready, the old one is told to retire (`Retire`): it hands its resumable v1 streams over
(their clients resume on a worker that goes on with them), asks AudioHook sessions to
reconnect, drains the rest and exits. The next worker is replaced only then, so the
others serve throughout, as gunicorn's and nginx's reloads do. A replacement that does
not become ready stops the reload, the old worker still serving.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace

from server.supervisor.children import Child, Keeper
from server.supervisor.control import Control

log = logging.getLogger("sensestream.supervisor")


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """How long a new worker may take to load, and an old one to hand on and exit."""

    ready_s: float
    retire_s: float


async def reload_workers(
    workers: list[Child], control: Control, keeper: Keeper, plan: ReloadPlan
) -> bool:
    """Replace every worker in `workers` (in place), one at a time; whether all were."""
    log.info("reload: replacing %d worker(s) one at a time", len(workers))
    for index, old in enumerate(list(workers)):
        new = Child(replace(old.spec, first_argv=None))  # waits until ready to serve
        try:
            if not await _replace(old, new, control, plan):
                await new.stop(plan.retire_s)
                return False
            workers[index] = new
            keeper.forget(old)
            keeper.watch(new)
            await _retire(old, control, plan.retire_s)
        except asyncio.CancelledError:  # the host stops: neither process may be left over
            await asyncio.gather(new.stop(plan.retire_s), old.stop(plan.retire_s))
            raise
        log.info("reload: %s replaced (pid %s)", new.spec.name, new.pid)
    log.info("reload done")
    return True


async def _replace(old: Child, new: Child, control: Control, plan: ReloadPlan) -> bool:
    """Start `new`; whether it is ready to take `old`'s place."""
    await new.start()
    if new.pid is not None and await control.until_ready(new.pid, plan.ready_s):
        return True
    log.error("reload: %s's replacement is not ready: reload stopped", old.spec.name)
    return False


async def _retire(old: Child, control: Control, timeout_s: float) -> None:
    """Tell the old worker to hand on and exit; one that cannot be told, or takes too
    long, is stopped as at shutdown."""
    old.retiring()
    if old.pid is not None and control.retire(old.pid) and await old.exited(timeout_s):
        return
    await old.stop(timeout_s)
