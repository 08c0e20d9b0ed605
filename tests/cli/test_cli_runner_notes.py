"""What ``agentloom`` says about itself: one wall time, the warm runner's start, and ``stop``'s count.

Real CLI processes: the time printed is the command's own (it covers a step that sleeps, and is no
less than the run's own time), the command that starts a home's warm runner says once that it stays
up and how to stop it, and ``stop`` counts the runs in progress as they are (none right after a run).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from cli_support import CLI, WARM_IDLE_SECONDS, cli_env, run_cli
from wait_support import wait_until

from airflow_provider_agentloom.runner.warm import client

SUMMARY_TIME = re.compile(r"\bin (\d+\.\d) s\b")


def test_a_run_prints_one_wall_time_its_commands_own(tmp_path: Path, warm_home: Path) -> None:
    flow = tmp_path / "nap.yaml"
    flow.write_text(
        "name: nap\nsteps:\n  - {id: nap, type: tool, tool_name: shell_command, tool_args: {command: 'sleep 1'}}\n",
        encoding="utf-8",
    )
    proc = run_cli("run", str(flow), "--json", cwd=tmp_path, env=cli_env(warm_home, warm=True))
    assert proc.returncode == 0, proc.stderr
    times = SUMMARY_TIME.findall(proc.stderr + proc.stdout)
    assert len(times) == 1, proc.stderr  # one time only
    printed = float(times[0])
    assert printed >= 1.0, proc.stderr  # the step slept 1 s
    run_seconds = json.loads(proc.stdout)["total_duration_ms"] / 1000
    assert printed + 0.05 >= run_seconds  # the command holds the run (printed to 0.1 s)
    assert proc.stderr.rstrip().splitlines()[-1] == f"nap: success in {times[0]} s"


def test_the_runner_says_it_stays_up_and_stop_counts_the_runs_in_progress(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = cli_env(home, warm=True)
    quick, slow = tmp_path / "quick.yaml", tmp_path / "slow.yaml"
    quick.write_text(
        "name: quick\nsteps:\n  - {id: a, type: tool, tool_name: shell_command, tool_args: {command: 'echo a'}}\n",
        encoding="utf-8",
    )
    started = tmp_path / "started"
    slow.write_text(
        "name: slow\nsteps:\n  - {id: wait, type: tool, tool_name: shell_command,\n"
        f"     tool_args: {{command: 'touch {started}; sleep 3'}}}}\n",
        encoding="utf-8",
    )
    resolved = home.resolve()

    nothing = run_cli("stop", env=env)
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout.strip() == f"No warm runner runs for {resolved}: no run in progress."

    first = run_cli("run", str(quick), cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    notice = first.stderr.splitlines()[0]
    minutes = int(WARM_IDLE_SECONDS) // 60
    assert notice == (
        f"agentloom: started a warm runner for {resolved}; it stays up to {minutes} minutes after its "
        "last run to make the next runs fast (`agentloom stop` stops it now; --no-daemon runs without it)"
    )
    second = run_cli("run", str(quick), cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    assert "warm runner" not in second.stderr  # said once, by the command that started it
    # Right after a run, none is in progress (its process has ended, whether or not the runner's
    # loop has noticed yet).
    status = client.request(resolved, "status")
    assert status is not None
    assert status["runs"] == 0, status

    with subprocess.Popen(
        [*CLI, "run", str(slow)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as running:
        wait_until(started.exists, 120, "the slow step to start")
        stopped = run_cli("stop", env=env)
        out, err = running.communicate(timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert (
        stopped.stdout.strip() == f"Stopped the warm runner of {resolved} once its 1 run in progress ended."
    )
    assert running.returncode == 0, err  # stop let it finish
    assert out.startswith("wait: ")
    again = run_cli("stop", env=env)
    assert again.stdout.strip() == f"No warm runner runs for {resolved}: no run in progress."
