"""Running the ``agentloom`` CLI from tests: the command and a clean, network-guarded environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "airflow_provider_agentloom.cli"]

GUARD_DIR = Path(__file__).resolve().parent / "subprocess_guard"
CHECKOUT = Path(__file__).resolve().parents[1]
"""The checkout these tests belong to: a CLI process imports its package, as the test process does.
Without it on ``PYTHONPATH`` a process started in a test's folder imports the copy the environment
was installed from (an editable install's ``.pth``), which in a second worktree is another one."""


_VENDOR_PREFIXES = ("OPENAI_", "ANTHROPIC_", "GOOGLE_", "OLLAMA_")


def is_outside_setting(name: str) -> bool:
    """Whether a variable of the developer's shell must not reach a test: model keys and endpoints
    (upstream's variables) and proxies (tests talk to loopback only)."""
    return name.startswith(_VENDOR_PREFIXES) or "PROXY" in name.upper()


WARM_HOMES: set[Path] = set()
"""The homes whose warm runner a test used: the session stops each of them at its end (conftest)."""

WARM_IDLE_SECONDS = "300"
"""A test's warm runner stops by itself after this long without a run, even if the session died."""


def cli_env(home: Path | str, *python_path: Path, warm: bool = False, **extra: str) -> dict[str, str]:
    """The environment of a CLI process: no Airflow, vendor or proxy settings of ours, loopback only.

    :param home: the runner's private Airflow home (``AGENTLOOM_HOME``).
    :param python_path: folders put on ``PYTHONPATH`` (tool modules), before this checkout and the
        network guard.
    :param warm: run through the home's warm runner, as a user's ``agentloom run`` does; by
        default a test runs in the CLI's own process (``AGENTLOOM_NO_DAEMON``), so that what it
        checks of that process (signals, what it leaves behind) is about one command alone.
    :param extra: more variables (``OPENAI_BASE_URL``…), set last.
    """
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("AIRFLOW") and not is_outside_setting(name)
    }
    env["PYTHONPATH"] = os.pathsep.join([*map(str, python_path), str(CHECKOUT), str(GUARD_DIR)])
    env["AGENTLOOM_HOME"] = str(home)
    # A command that imports Airflow without the runner's home (`validate`) would otherwise make
    # Airflow's default home, ~/airflow, outside the test's folder. The runner's commands point
    # AIRFLOW_HOME at this same folder themselves.
    env["AIRFLOW_HOME"] = str(home)
    env["AGENTLOOM_AIRFLOW_LOG_LEVEL"] = "INFO"
    if warm:
        WARM_HOMES.add(Path(home).resolve())
        env["AGENTLOOM_RUNNER_IDLE_TIMEOUT"] = WARM_IDLE_SECONDS
        env.pop("AGENTLOOM_NO_DAEMON", None)
    else:
        env["AGENTLOOM_NO_DAEMON"] = "1"
    env.update(extra)
    return env


def run_cli(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """Run ``agentloom ARGS`` to its end and return what it printed (never raises on its exit code)."""
    return subprocess.run(
        [*CLI, *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,  # never a terminal: an approval gate would ask on it
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def fresh_python_json(tmp_path: Path, code: str, *args: str, **extra: str) -> Any:
    """Run ``code`` in a fresh interpreter (a private Airflow home under ``tmp_path``, ``extra`` set
    last) and return the JSON document its last line printed; fail the test if it fails."""
    env = cli_env(tmp_path / "home", AIRFLOW_HOME=str(tmp_path / "airflow"), **extra)
    return python_json(code, *args, env=env, cwd=tmp_path)


def python_json(code: str, *args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> Any:
    """Run ``code`` in a fresh interpreter with ``env`` and return the JSON document its last line
    printed; fail the test if it fails."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
