"""A fleet under load on a Sentinel group whose master is SIGKILLed mid-load (the failover test
and ``bench.failover`` share it): submissions go on through the failover; every accepted one is
then looked for in the store."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from tests.support import outcomes
from tests.support.fleet import fleet_settings, running_fleet, runtime_for, wait_for
from tests.support.redis_servers import SentinelGroup


@dataclass(frozen=True)
class Failover:
    """What a run measured: the outcome over the accepted tasks and the times."""

    outcome: outcomes.Outcome
    #: Submissions that raised (not accepted: the caller saw an error and may retry).
    refused: int
    #: SIGKILL to the sentinels naming the new master.
    promoted_s: float
    #: SIGKILL to the first accepted task that finished after it (any task).
    first_finish_s: float | None
    #: SIGKILL to the first finish of a task submitted after the SIGKILL (served by the new
    #: master's broker, or by the sweeper's wake-up).
    first_new_finish_s: float | None
    #: Submission start to the last accepted task finished.
    total_s: float
    #: Log lines of the fleet's processes that show the Redis password.
    leaked: int = 0
    #: Wake-up publishes that failed (Redis down; a batch counts once): the sweeper sends them.
    unsent: int = 0

    def lines(self) -> list[str]:
        def s(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f} s"

        return [
            self.outcome.line() + f", refused {self.refused}, password in logs {self.leaked}",
            f"wake-up publishes that failed (left to the sweeper): {self.unsent}",
            f"kill -9 → new master named by the sentinels: {s(self.promoted_s)}",
            f"kill -9 → first task finished: {s(self.first_finish_s)}",
            f"kill -9 → first task submitted after the kill finished: {s(self.first_new_finish_s)}",
            f"all accepted tasks finished after {s(self.total_s)}",
        ]


def run(
    tmp: Path,
    group: SentinelGroup,
    database_url: str,
    config_dir: Path,
    *,
    deployment: str = "slowchat",
    conversations: int = 12,
    per: int = 10,
    kill_after: float = 0.3,
    pace_s: float = 0.04,
    workers: int = 2,
    patience_s: float = 45.0,
    via_api: bool = False,
    **overrides: Any,
) -> Failover:
    """``conversations`` times ``per`` tasks submitted at about one per ``pace_s`` by one thread
    per conversation (in this process's dispatcher, or with ``via_api`` as SubmitTask requests
    to a ``fleet serve``) while ``workers`` workers (2 processes each) and a beat run; the
    master is SIGKILLed once ``kill_after`` of them were accepted."""
    settings = fleet_settings(
        tmp, database_url, group.url, config_dir, **group.settings(), **overrides
    )
    total = conversations * per
    accepted: list[tuple[uuid.UUID, datetime]] = []
    refused = 0
    lock = threading.Lock()
    unsent = _Unsent()
    waker_log = logging.getLogger("fleet.dispatch.celery_app")
    waker_log.addHandler(unsent)
    waker_log.propagate = False  # counted, not printed
    with (
        running_fleet(tmp, **settings) as fleet,
        runtime_for(settings) as rt,
        contextlib.ExitStack() as undo,
    ):
        undo.callback(waker_log.removeHandler, unsent)
        undo.callback(setattr, waker_log, "propagate", True)
        for i in range(workers):
            fleet.worker(f"w{i + 1}", concurrency=2)
        fleet.beat()
        api = fleet.serve() if via_api else None

        def one(http: httpx.Client | None, conv: int, n: int) -> uuid.UUID:
            if http is None:
                return rt.dispatcher.submit(deployment, f"c{conv} m{n}", key=f"c{conv}").task.id
            answer = http.post(
                "/v1/tasks",
                json={
                    "deployment": deployment,
                    "input": f"c{conv} m{n}",
                    "conversationKey": f"c{conv}",
                },
            )
            answer.raise_for_status()
            return uuid.UUID(answer.json()["id"])

        def submit(conv: int) -> None:
            nonlocal refused
            with contextlib.ExitStack() as close:
                http = close.enter_context(httpx.Client(base_url=api, timeout=30)) if api else None
                for n in range(per):
                    try:
                        task_id = one(http, conv, n)
                    except Exception:  # not accepted: the caller was told so
                        with lock:
                            refused += 1
                        continue
                    with lock:
                        accepted.append((task_id, datetime.now(UTC)))
                    time.sleep(pace_s * conversations)

        started = time.monotonic()
        threads = [threading.Thread(target=submit, args=(c,)) for c in range(conversations)]
        for t in threads:
            t.start()
        wait_for(lambda: len(accepted) >= total * kill_after, 30, what="load before the kill")
        killed_at = datetime.now(UTC)
        killed = time.monotonic()
        old = group.master.port
        group.fail_over()
        wait_for(lambda: group.master_port() not in (None, old), 30, what="a new master")
        promoted_s = time.monotonic() - killed
        for t in threads:
            t.join()
        ids = [i for i, _ in accepted]
        wait_for(
            lambda: outcomes.finished(rt.store, ids) == len(ids),
            patience_s,
            interval=0.2,
            what="every accepted task to finish",
        )
        total_s = time.monotonic() - started
        result = outcomes.outcome(rt.store, ids, after=killed_at)
        later = [i for i, at in accepted if at > killed_at]
        after = outcomes.outcome(rt.store, later, after=killed_at) if later else None
        leaked = sum(p.log().count(group.password) for p in fleet.procs)
        unsent.count += sum(
            1
            for p in fleet.procs
            if p.name == "api"
            for line in p.log().splitlines()
            if "wake-up" in line and "not sent" in line
        )
    return Failover(
        outcome=result,
        refused=refused,
        promoted_s=promoted_s,
        first_finish_s=_since(result.first_finish_after, killed_at),
        first_new_finish_s=_since(after.first_finish_after if after else None, killed_at),
        total_s=total_s,
        leaked=leaked,
        unsent=unsent.count,
    )


class _Unsent(logging.Handler):
    """Counts the in-process waker's "wake-ups ... not sent" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "not sent" in record.getMessage():
            self.count += 1


def _since(at: datetime | None, start: datetime) -> float | None:
    return None if at is None else (at - start).total_seconds()
