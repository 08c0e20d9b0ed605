"""What ``agentloom run`` and ``validate`` print, as printed (real CLI processes).

``run`` ends with each step's output on one line (stdout), whole when stdout is a pipe and shortened
to the terminal's width when it is a terminal, with secrets masked; ``validate`` names a provider and model only for workflows that call a model; the
quick-start example leaves the repository it runs from clean.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import termios
from pathlib import Path

import pytest
from cli_support import CLI, cli_env, run_cli

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-token-value"

OUTPUTS = f"""name: outputs
state:
  token: {SECRET}
  level: low
state_schema:
  token: {{redact: true}}
  issued: {{redact: true}}
steps:
  - id: lines
    type: tool
    tool_name: shell_command
    tool_args: {{command: "printf 'first line\\\\n\\\\nsecond   line\\\\n'"}}
    output: lines
  - id: long
    type: tool
    tool_name: shell_command
    tool_args: {{command: "printf 'x%.0s' $(seq 1 300)"}}
  - id: leak
    type: tool
    tool_name: shell_command
    tool_args: {{command: "echo {{state.token}}"}}
  - id: issue
    type: tool
    tool_name: shell_command
    tool_args: {{command: "echo fresh-credential-42"}}
    output: issued.value
  - id: route
    type: router
    depends_on: [lines]
    conditions:
      - {{expression: "state.level == 'high'", target: alarm}}
    default: note
  - id: alarm
    type: tool
    depends_on: [route]
    tool_name: shell_command
    tool_args: {{command: "echo alarm"}}
  - id: note
    type: tool
    depends_on: [route]
    tool_name: shell_command
    tool_args: {{command: "echo noted"}}
  - id: broken
    type: tool
    tool_name: not_registered
"""


def test_run_ends_with_each_steps_output_on_one_line(tmp_path: Path, warm_home: Path) -> None:
    flow = tmp_path / "outputs.yaml"
    flow.write_text(OUTPUTS, encoding="utf-8")
    env = cli_env(warm_home, COLUMNS="60", warm=True)
    proc = run_cli("run", str(flow), cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr  # `broken` fails
    lines = proc.stdout.splitlines()
    by_step = {line.split(": ", 1)[0]: line for line in lines}
    assert sorted(by_step) == sorted(["lines", "long", "leak", "issue", "broken", "route", "alarm", "note"])
    assert len(lines) == 8
    # A dict output: its JSON on one line (a newline in a string is JSON's \\n), whole: stdout is a
    # pipe, so $COLUMNS (60) does not cut it.
    assert by_step["lines"] == (
        'lines: {"returncode": 0, "stdout": "first line\\n\\nsecond line\\n", "stderr": ""}'
    )
    assert by_step["long"] == f'long: {{"returncode": 0, "stdout": "{"x" * 300}", "stderr": ""}}'
    # A router's output is its choice; the branch it did not choose, a failed step: their status.
    assert by_step["route"] == "route: note"
    assert by_step["alarm"] == "alarm: (skipped)"
    assert by_step["broken"] == "broken: (failed)"
    assert by_step["note"] == 'note: {"returncode": 0, "stdout": "noted\\n", "stderr": ""}'
    # Secrets: a redacted state value echoed by a tool is masked by its task, and an output written
    # under a redacted key shows as its marker.
    assert SECRET not in proc.stdout + proc.stderr
    assert by_step["leak"].startswith('leak: {"returncode": 0, "stdout": "<REDACTED:sha256='), by_step["leak"]
    assert re.fullmatch(r"issue: <REDACTED:sha256=[0-9a-f]{16}>", by_step["issue"]), by_step["issue"]
    assert "fresh-credential-42" not in proc.stdout
    # The outputs come after the run's summary (stderr), and --json prints none of them.
    assert proc.stderr.rstrip().splitlines()[-2:][0].startswith("outputs: failed in ")  # then its error
    as_json = run_cli("run", str(flow), "--json", cwd=tmp_path, env=env)
    assert as_json.stdout.lstrip().startswith("{")
    assert "route: note" not in as_json.stdout


def test_run_shortens_its_output_lines_to_the_terminal_only_on_a_terminal(
    tmp_path: Path, warm_home: Path
) -> None:
    flow = tmp_path / "long.yaml"
    flow.write_text(
        "name: long-line\nsteps:\n  - {id: long, type: tool, tool_name: shell_command,\n"
        "     tool_args: {command: \"printf 'x%.0s' $(seq 1 300)\"}}\n",
        encoding="utf-8",
    )
    env = cli_env(warm_home, warm=True)
    env.pop("COLUMNS", None)  # the terminal's own width
    env.pop("LINES", None)
    piped = run_cli("run", str(flow), cwd=tmp_path, env=env)
    assert piped.returncode == 0, piped.stderr
    whole = f'long: {{"returncode": 0, "stdout": "{"x" * 300}", "stderr": ""}}'
    assert piped.stdout.splitlines() == [whole]

    # The same run with stdout on a terminal 50 columns wide: the line is cut to 50, with an ellipsis.
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 50, 0, 0))
    with subprocess.Popen(
        [*CLI, "run", str(flow)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            shown += chunk
        _, errors = process.communicate(timeout=240)
    os.close(leader)
    assert process.returncode == 0, errors
    assert shown.decode().splitlines() == [whole[:49] + "…"]


def test_validate_names_provider_and_model_only_for_workflows_that_call_a_model(tmp_path: Path) -> None:
    tools_only = tmp_path / "tools_only.yaml"
    tools_only.write_text(
        "name: tools-only\nconfig: {provider: mock, model: m1, budget_usd: 1}\n"
        "steps:\n  - {id: a, type: tool, tool_name: shell_command, tool_args: {command: echo}}\n"
        "  - id: sub\n    type: subworkflow\n    workflow_inline:\n      name: child\n"
        "      steps: [{id: c, type: tool, tool_name: shell_command, tool_args: {command: echo}}]\n",
        encoding="utf-8",
    )
    nested_model = tmp_path / "nested_model.yaml"
    nested_model.write_text(
        "name: nested-model\nconfig: {provider: mock, model: m1}\n"
        "steps:\n  - id: sub\n    type: subworkflow\n    workflow_inline:\n      name: child\n"
        "      steps: [{id: c, type: llm_call, prompt: hi}]\n",
        encoding="utf-8",
    )
    proc = run_cli(
        "validate", str(tools_only), str(nested_model), cwd=tmp_path, env=cli_env(tmp_path / "home")
    )
    assert proc.returncode == 0, proc.stderr
    heads = [line for line in proc.stdout.splitlines() if line.startswith("ok  ")]
    assert heads == [
        f"ok  {tools_only}: 'tools-only' v1.0, 2 steps in 1 layer",
        f"ok  {nested_model}: 'nested-model' v1.0, 1 step in 1 layer (provider mock, model m1)",
    ]


def test_the_quick_start_leaves_the_repository_clean(tmp_path: Path, warm_home: Path) -> None:
    """``agentloom run dags/order_pipeline.yaml`` from a checkout: success, and ``git status`` stays clean."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    repo = tmp_path / "checkout"
    shutil.copytree(ROOT / "dags", repo / "dags")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run(["git", "-C", str(repo), *identity, "commit", "-qm", "checkout"], check=True)
    env = cli_env(warm_home, COLUMNS="500", warm=True)
    proc = run_cli("run", "dags/order_pipeline.yaml", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    saved = re.search(r'^save_order: \{"written": 43, "path": "([^"]+)"\}$', proc.stdout, re.MULTILINE)
    assert saved, proc.stdout
    path = Path(saved.group(1))
    try:
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert status.stdout == ""
        # The run's own folder: <working_dir>/<dag_id>/<run_id>/orders/A-1001.json.
        run_folder = path.parents[1]
        assert path.parts[-2:] == ("orders", "A-1001.json")
        assert run_folder.parent == Path("/tmp/agentloom/order-pipeline").resolve()
        assert path.read_text(encoding="utf-8") == '{"order": "A-1001", "first_item": "widget"}'
        summary = (run_folder / "summary.txt").read_text(encoding="utf-8")
        assert summary == f"order A-1001 saved as {path}, 43 bytes\n"
        assert re.search(
            rf'^count: .*"stdout": "{len(summary.encode())} summary.txt', proc.stdout, re.MULTILINE
        )
    finally:
        shutil.rmtree(path.parents[1], ignore_errors=True)


def test_validate_names_the_file_line_key_and_closest_name_of_a_read_nothing_provides(tmp_path: Path) -> None:
    flow, child = tmp_path / "flow.yaml", tmp_path / "child.yaml"
    flow.write_text(
        "name: typo\nstate: {text: hi}\nsteps:\n"
        "  - {id: count, type: tool, tool_name: shell_command, tool_args: {command: 'echo {state.txet}'}}\n"
        "  - id: ask\n    type: llm_call\n    prompt: |\n      first\n      {steps.cuont.output.stdout}\n"
        "  - {id: sub, type: subworkflow, workflow_path: child.yaml}\n",
        encoding="utf-8",
    )
    child.write_text(
        "name: child\nsteps:\n  - {id: c, type: llm_call, prompt: '{state.tetx}'}\n", encoding="utf-8"
    )
    proc = run_cli("validate", str(flow), cwd=tmp_path, env=cli_env(tmp_path / "home"))
    assert proc.returncode == 0, proc.stderr  # a warning: the file loads
    warnings = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("warning:")]
    empty = "it renders as an empty string"
    assert warnings == [
        "warning: line 4: steps[0].tool_args.command: step 'count' reads {state.txet}, but no state key, "
        f"param or step output is called 'txet': {empty} (did you mean text?)",
        "warning: line 9: steps[1].prompt: step 'ask' reads {steps.cuont.output.stdout}, but there is no "
        f"step 'cuont': {empty} (did you mean count?)",
        f"warning: {child}:3: steps[0].prompt: step 'c' reads {{state.tetx}}, but no state key, param or "
        f"step output is called 'tetx': {empty} (did you mean text?)",  # the child's own file
    ]


def test_validate_refuses_a_template_no_run_can_render(tmp_path: Path) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "name: braces\nstate: {x: 1}\nsteps:\n"
        "  - {id: a, type: tool, tool_name: shell_command, tool_args: {command: 'echo {state.x'}}\n",
        encoding="utf-8",
    )
    proc = run_cli("validate", str(flow), cwd=tmp_path, env=cli_env(tmp_path / "home"))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"invalid  {flow}",
        f"    {flow}:4: steps[0].tool_args.command: step 'a': broken braces in template: unterminated "
        "placeholder '{state.x' (expected '}' after the path; write {{ for a literal brace)",
    ]
