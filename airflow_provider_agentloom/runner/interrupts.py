"""Ctrl-C and ``kill`` during a run: the first stops the run in order, a second one at once.

The first SIGINT, SIGTERM or SIGHUP kills every running step's process tree at once, and the
runner then marks the DAG run failed and returns its result, raised as :class:`RunInterrupted`.
A second signal kills whatever is left and raises ``KeyboardInterrupt`` on the spot. Handlers
are installed only while a run lasts, and only when the run is driven from the main thread
(Python delivers signals there alone); the previous handlers come back afterwards.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_agentloom.workflow.results import RunResult

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def signal_label(signum: int) -> str:
    """``SIGINT (Ctrl-C)``, ``SIGTERM``…"""
    name = signal.Signals(signum).name
    return f"{name} (Ctrl-C)" if signum == signal.SIGINT else name


class RunInterrupted(KeyboardInterrupt):
    """Raised by ``run_workflow`` when a signal stopped the run; carries the failed run's result.

    :ivar result: the run's :class:`RunResult` (status ``failed``, the error says why).
    :ivar signum: the signal that stopped it (the CLI exits ``128 + signum``).
    """

    def __init__(self, result: RunResult, signum: int) -> None:
        super().__init__(result.error or "interrupted")
        self.result = result
        self.signum = signum


class InterruptGuard:
    """While active, turn the first stop signal into a request and a second into an exit.

    :param kill_now: called from the handler on each signal; kills the run's processes. It
        must be safe to call at any moment of the runner's loop.
    :param stop: an event that, once set, requests the stop as a signal would.
    """

    def __init__(self, kill_now: Callable[[], None], stop: threading.Event | None = None) -> None:
        self.kill_now = kill_now
        self.signum: int | None = None
        self._owner = os.getpid()
        self._previous: dict[int, Any] = {}
        self._event = stop if stop is not None else threading.Event()

    @property
    def requested(self) -> bool:
        """Whether a signal arrived, or the ``stop`` event was set (from another thread, say)."""
        return self._event.is_set()

    @property
    def reason(self) -> str:
        """``interrupted by SIGINT (Ctrl-C)``, or ``cancelled`` when the stop event was set."""
        return f"interrupted by {signal_label(self.signum)}" if self.signum is not None else "cancelled"

    def request(self, signum: int) -> None:
        """Ask the run to stop, as that signal would (also usable from another thread)."""
        if self.signum is None:
            self.signum = signum
        self._event.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._owner:
            return  # a child forked a moment ago, before it reset its handlers
        again = self.requested
        self.request(signum)
        self.kill_now()
        if again:
            raise KeyboardInterrupt(f"interrupted again by {signal_label(signum)}")

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                if signal.getsignal(signum) is signal.SIG_IGN:
                    continue  # ignored on purpose (``nohup``): the run goes on
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
