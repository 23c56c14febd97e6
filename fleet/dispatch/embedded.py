"""Embedded mode's loop: serve in-process wake-ups until a task is finished."""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
import uuid

from fleet.dispatch.manager import Dispatcher
from fleet.dispatch.pids import pid_alive
from fleet.dispatch.waker import LocalWaker
from fleet.domain.fairness import Turn
from fleet.domain.values import Task

log = logging.getLogger(__name__)

#: How long the loop rests when nothing is scheduled (another process holds the conversation).
IDLE_POLL_S = 0.1
#: After the runs are handed back, how long ``stop`` waits for its threads to end.
JOIN_S = 2.0
#: How long a run cancelled by ``give_up`` may take to stop before it is handed back (a tool
#: call sees the cancel within ``stops.POLL_S``; a model call may not look at all).
GIVE_UP_GRACE_S = 2.0


def holder_alive(worker: str | None) -> bool:
    """Is the process named ``host:pid`` still running? Unknown hosts count as alive."""
    if not worker:
        return False
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    return pid_alive(int(pid))


def run_until_done(
    dispatcher: Dispatcher, waker: LocalWaker, task_id: uuid.UUID, timeout_s: float
) -> Task:
    """Drain woken conversations in this process until ``task_id`` is terminal or time is up.

    Runs first recover what an earlier process left running when it died (its pid is gone).
    """
    dispatcher.sweep(alive=holder_alive)
    deadline = time.monotonic() + timeout_s
    rest = threading.Event()
    while True:
        task = dispatcher.store.get_task(task_id)
        if task.status.terminal or time.monotonic() >= deadline:
            return task
        turn = waker.pop_due(dispatcher.clock())
        if turn is not None:
            try:
                dispatcher.drain(turn.conversation_id, tenant=turn.tenant, priority=turn.priority)
            finally:
                waker.done(turn.conversation_id)
            continue
        due = waker.next_due()
        if due is None:
            dispatcher.sweep(alive=holder_alive)
            if waker.next_due() is None:
                rest.wait(IDLE_POLL_S)
            continue
        rest.wait(max(0.0, min(due - time.time(), deadline - time.monotonic())))


def run_within(
    dispatcher: Dispatcher, waker: LocalWaker, task_id: uuid.UUID, timeout_s: float
) -> Task:
    """``run_until_done`` on a thread of its own, so that ``timeout_s`` holds while a run
    executes: the task once terminal, or as it is when time is up (its run still going: see
    ``give_up``)."""
    ended: list[Task] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            ended.append(run_until_done(dispatcher, waker, task_id, timeout_s))
        except BaseException as exc:  # raised again in the waiting thread
            failed.append(exc)

    thread = threading.Thread(target=work, name="fleet-run", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if failed:
        raise failed[0]
    return ended[0] if ended else dispatcher.store.get_task(task_id)


def give_up(dispatcher: Dispatcher, task_id: uuid.UUID, grace_s: float = GIVE_UP_GRACE_S) -> Task:
    """Cancel a task this process stops waiting for: embedded, nothing else would finish it
    once the process exits. A queued task is cancelled at once; a running one stops at its
    watch's next look (a tool call is stopped), or is handed back after ``grace_s`` with the
    cancel winning; any other run of the process is handed back, resumable. The task as
    stored then (it may have finished just before)."""
    dispatcher.cancel(task_id)
    dispatcher.shut_down(grace_s)
    return dispatcher.store.get_task(task_id)


class EmbeddedLoop:
    """Runs woken conversations in this process on a bounded pool of threads (embedded ``serve``,
    the SDK): each thread drains one conversation under the local lease, so a conversation's
    tasks still run one at a time in order while up to ``concurrency`` conversations overlap.

    It also sweeps every ``sweep_interval``, so work left by a crashed process or admitted by
    another process on the same SQLite file is started too.
    """

    def __init__(
        self, dispatcher: Dispatcher, waker: LocalWaker, concurrency: int | None = None
    ) -> None:
        self._dispatcher = dispatcher
        self._waker = waker
        #: Conversations drained at once (``FLEET_EMBEDDED_CONCURRENCY`` unless given).
        self.concurrency = concurrency or dispatcher.settings.embedded_concurrency
        self._stop = threading.Event()
        self._lock = threading.Lock()
        #: Conversations handed to a thread and not finished yet (at most ``concurrency``).
        self._busy: set[uuid.UUID] = set()
        #: Woken while busy: woken again when their drain ends (a second thread would only knock).
        self._again: dict[uuid.UUID, Turn] = {}
        self._work: queue.SimpleQueue[Turn | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="fleet-embedded", daemon=True)
        self._drainers = [
            threading.Thread(target=self._drain_loop, name=f"fleet-drain-{i}", daemon=True)
            for i in range(self.concurrency)
        ]

    def start(self) -> None:
        for t in self._drainers:
            t.start()
        self._thread.start()

    def stop(self, grace_s: float | None = None) -> int:
        """Stop taking work, as a worker does on SIGTERM: each run hands its task back after its
        current step, within ``grace_s`` (``FLEET_SHUTDOWN_GRACE`` unless given); a step still
        running then is abandoned. The tasks stay resumable: the next start (or another process
        on the same store) resumes them from their journal. Returns how many were abandoned."""
        grace = self._dispatcher.settings.shutdown_grace if grace_s is None else grace_s
        self._stop.set()
        self._waker.changed.set()
        abandoned = self._dispatcher.shut_down(grace)
        deadline = time.monotonic() + JOIN_S
        if self._thread.is_alive():
            self._thread.join(JOIN_S)
        for _ in self._drainers:
            self._work.put(None)
        for t in self._drainers:  # an abandoned step's thread is left behind (a daemon)
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))
        return abandoned

    def _run(self) -> None:
        interval = self._dispatcher.settings.sweep_interval
        next_sweep = 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_sweep:
                    self._dispatcher.sweep(alive=holder_alive)
                    next_sweep = time.monotonic() + interval
                self._hand_out()
            except Exception:  # keep serving; the next sweep retries
                log.exception("embedded loop: sweep failed")
            self._waker.changed.clear()  # (then look again: a wake-up just before it is not lost)
            if self._stop.is_set():
                break
            wait = next_sweep - time.monotonic()
            due = self._waker.next_due()
            if due is not None and self._free():
                wait = min(wait, due - time.time())
            self._waker.changed.wait(max(0.0, wait))

    def _free(self) -> bool:
        with self._lock:
            return len(self._busy) < self.concurrency

    def _hand_out(self) -> None:
        """Give due conversations to idle threads while there are any."""
        while self._free() and not self._stop.is_set():
            turn = self._waker.pop_due(self._dispatcher.clock())
            if turn is None:
                return
            with self._lock:
                if turn.conversation_id in self._busy:
                    self._again[turn.conversation_id] = turn
                    self._waker.done(turn.conversation_id)
                    continue
                self._busy.add(turn.conversation_id)
            self._work.put(turn)

    def _drain_loop(self) -> None:
        while (turn := self._work.get()) is not None:
            conversation = turn.conversation_id
            try:
                self._dispatcher.drain(conversation, tenant=turn.tenant, priority=turn.priority)
            except Exception:  # keep serving; the sweeper retries what failed
                log.exception("embedded loop: drain failed")
            finally:
                with self._lock:
                    self._busy.discard(conversation)
                    again = self._again.pop(conversation, None)
                self._waker.done(conversation)
                if again is not None:
                    self._waker.wake(
                        conversation, force=True, tenant=again.tenant, priority=again.priority
                    )
                self._waker.changed.set()  # a thread is free: the loop may hand out more
