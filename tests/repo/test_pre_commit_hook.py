"""The ``agentloom-validate`` pre-commit hook, run for real with ``pre-commit try-repo`` in a git repo.

The test runs the ``agentloom-validate-system`` variant, which uses the ``agentloom`` of this
environment: the ``language: python`` one runs the same entry after pre-commit has pip-installed the
provider and Airflow into its own environment, which takes minutes (see the README) — too slow for
the suite. Both hooks share the entry and the ``files`` pattern, which the last test checks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_support import cli_env

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / ".pre-commit-hooks.yaml"
GOOD = ROOT / "dags" / "order_pipeline.yaml"
BAD = """name: bad-flow
steps:
  - id: hello
    type: tool
    tool_name: shell_command
    tool_arg: {command: echo hi}
"""


def pre_commit(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = cli_env(home / "agentloom-home")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PRE_COMMIT_HOME"] = str(home / "pre-commit")
    env["AIRFLOW_HOME"] = str(home / "airflow")
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository holding a good and a bad workflow under ``dags/`` and a non-workflow YAML."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of the provider (pre-commit try-repo clones it)")
    repo = tmp_path / "project"
    (repo / "dags").mkdir(parents=True)
    shutil.copy2(GOOD, repo / "dags" / "good.yaml")
    (repo / "dags" / "bad.yaml").write_text(BAD, encoding="utf-8")
    (repo / "compose.yaml").write_text("services: {web: {image: nginx}}\n", encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    return repo


def test_the_hook_passes_a_good_workflow_and_fails_a_bad_one_naming_line_and_key(
    project: Path, tmp_path: Path
) -> None:
    good = pre_commit(
        "try-repo",
        str(ROOT),
        "agentloom-validate-system",
        "--files",
        "dags/good.yaml",
        cwd=project,
        home=tmp_path,
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout

    both = pre_commit(
        "try-repo",
        str(ROOT),
        "agentloom-validate-system",
        "--files",
        "dags/good.yaml",
        "dags/bad.yaml",
        cwd=project,
        home=tmp_path,
    )
    assert both.returncode == 1, both.stdout + both.stderr
    assert "Failed" in both.stdout
    assert "invalid  dags/bad.yaml" in both.stdout
    assert "dags/bad.yaml:6: steps[0].tool_arg: unknown key 'tool_arg'" in both.stdout
    assert "did you mean tool_args?" in both.stdout
    assert "ok  dags/good.yaml" in both.stdout

    # A YAML file outside dags/ and workflows/ is not a workflow: the hook leaves it alone.
    other = pre_commit(
        "try-repo",
        str(ROOT),
        "agentloom-validate-system",
        "--files",
        "compose.yaml",
        cwd=project,
        home=tmp_path,
    )
    assert other.returncode == 0, other.stdout + other.stderr
    assert "Skipped" in other.stdout


def test_both_hooks_run_the_same_check_on_the_same_files() -> None:
    hooks = {hook["id"]: hook for hook in yaml.safe_load(HOOKS.read_text(encoding="utf-8"))}
    assert set(hooks) == {"agentloom-validate", "agentloom-validate-system"}
    python, system = hooks["agentloom-validate"], hooks["agentloom-validate-system"]
    assert python["language"] == "python"
    assert system["language"] == "system"
    for key in ("entry", "files", "types", "require_serial"):
        assert python[key] == system[key], key
    assert python["entry"] == "agentloom validate"
