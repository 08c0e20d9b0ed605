"""``agentloom serve`` refusals and preparation, without starting Airflow.

Bad arguments exit 2, an unusable environment exits 1, each with one line naming the argument,
and nothing is started or written. The loader is placed only where none is, never over a file.
The live stack is tested in ``tests/e2e/test_serve.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import cli_env, run_cli

from airflow_provider_agentloom.serve import prepare
from airflow_provider_agentloom.serve.prepare import LOADER_TEXT, ServeError, ServeHome

WORKFLOW = (
    "name: one\nsteps:\n  - {id: a, type: tool, tool_name: shell_command, tool_args: {command: echo}}\n"
)


def _serve(tmp_path: Path, *args: str, cwd: Path | None = None) -> tuple[int, str]:
    result = run_cli(
        "serve", *args, "--home", str(tmp_path / "home"), cwd=cwd or tmp_path, env=cli_env(tmp_path / "home")
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("missing",), 2, "agentloom: error: no such dags folder: missing"),
        (("dags", "--port", "99999"), 2, "--port: expected a TCP port number (1-65535), got '99999'"),
        (
            ("dags", "--db", "mysql://root@localhost/airflow"),
            2,
            "--db mysql://root@localhost/airflow: expected a PostgreSQL URL",
        ),
        (("dags", "--db", "postgresql://u@127.0.0.1:1"), 2, "the URL names no database"),
        (("dags", "--db", "::"), 2, "--db: not a database URL"),
        (
            ("dags", "--db", "postgresql://u:topsecret@127.0.0.1:1/x"),
            1,
            "cannot connect: connection to server",
        ),
    ],
)
def test_a_bad_argument_is_named_and_nothing_starts(
    tmp_path: Path, args: tuple[str, ...], code: int, message: str
) -> None:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "one.yaml").write_text(WORKFLOW, encoding="utf-8")
    returncode, output = _serve(tmp_path, *args)
    assert returncode == code, output
    assert message in output
    assert "topsecret" not in output
    assert not (tmp_path / "dags" / "agentloom_dags.py").exists()
    assert not (tmp_path / "home" / "serve").exists()


def test_without_a_dags_folder_serve_asks_for_one(tmp_path: Path) -> None:
    returncode, output = _serve(tmp_path)
    assert returncode == 2
    assert f"no dags folder: {tmp_path} has no dags/ folder and no workflow YAML file" in output


def test_the_default_folder_is_dags_else_the_current_folder_with_workflows(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(WORKFLOW, encoding="utf-8")
    assert prepare.dags_folder(None, tmp_path) == tmp_path
    (tmp_path / "dags").mkdir()
    assert prepare.dags_folder(None, tmp_path) == tmp_path / "dags"


def test_the_loader_is_written_once_and_never_over_a_users_file(tmp_path: Path) -> None:
    mine = tmp_path / "agentloom_dags.py"
    mine.write_text("# my own DAG file\n", encoding="utf-8")

    loader, written = prepare.place_loader(tmp_path)

    assert (loader.name, written) == ("agentloom_serve_dags.py", True)
    assert loader.read_text(encoding="utf-8") == LOADER_TEXT
    assert mine.read_text(encoding="utf-8") == "# my own DAG file\n"
    assert prepare.place_loader(tmp_path) == (loader, False)


def test_a_loader_in_a_sub_folder_counts(tmp_path: Path) -> None:
    (tmp_path / "team").mkdir()
    theirs = tmp_path / "team" / "load.py"
    theirs.write_text(
        "from airflow_provider_agentloom.loader import load_workflows\nload_workflows(globals())\n"
    )
    assert prepare.place_loader(tmp_path) == (theirs, False)
    assert sorted(p.name for p in tmp_path.glob("*.py")) == []


def test_a_second_serve_on_the_same_home_is_refused(tmp_path: Path) -> None:
    home = ServeHome(tmp_path / "serve")
    held = prepare.lock_home(home)
    try:
        with pytest.raises(ServeError, match=r"another agentloom serve \(pid \d+\) is running on the home"):
            prepare.lock_home(home)
    finally:
        held.close()
    prepare.lock_home(home).close()


def test_serves_settings_win_and_the_users_other_settings_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", "/somewhere/else")
    monkeypatch.setenv("AIRFLOW__CORE__PARALLELISM", "16")
    monkeypatch.setenv("AIRFLOW_HOME", "/their/airflow")
    home = ServeHome(tmp_path / "serve")
    home.root.mkdir()
    ports = prepare.Ports(api=18080, worker_logs=18793, trigger_logs=18794)

    env = prepare.component_environment(home, tmp_path / "dags", ports, None, "id1")

    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(tmp_path / "dags")
    assert env["AIRFLOW_HOME"] == str(home.root)
    assert env["AIRFLOW__CORE__PARALLELISM"] == "16"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{home.root / 'airflow.db'}"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"
    assert (env["AIRFLOW__CORE__LOAD_EXAMPLES"], env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"]) == (
        "False",
        "False",
    )


def test_the_login_is_made_once_per_home(tmp_path: Path) -> None:
    home = ServeHome(tmp_path / "serve")
    home.root.mkdir()
    password = prepare.login_password(home)
    assert len(password) >= 16
    assert prepare.login_password(home) == password
    assert oct(home.passwords_file.stat().st_mode & 0o777) == "0o600"
