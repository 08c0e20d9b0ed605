"""Waiting on a condition instead of sleeping: the suite's one polling helper.

A fixed pause is either too short on a loaded machine (a flaky test) or too long everywhere (a slow
one); polling what the test waits for is neither.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, message: str, *, interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy and return that; fail after ``timeout`` s.

    ``message`` says what was awaited (``"the reaper to wait for its spec"``), for the failure.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)
