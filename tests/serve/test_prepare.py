"""``agentloom serve`` refusals and preparation, without starting Airflow.

Bad arguments exit 2, an unusable environment exits 1, each with one line naming the argument,
and nothing is started or written. The loader is placed only where none is, never over a file.
The live stack is tested in ``tests/e2e/test_serve.py``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cli_support import cli_env, run_cli

from airflow_provider_agentloom.serve import prepare
from airflow_provider_agentloom.serve.prepare import LOADER_TEXT, ServeError, ServeHome

WORKFLOW = (
    "name: one\nsteps:\n  - {id: a, type: tool, tool_name: shell_command, tool_args: {command: echo}}\n"
)


def _serve(tmp_path: Path, *args: str, cwd: Path | None = None, **env: str) -> tuple[int, str]:
    result = run_cli(
        "serve",
        *args,
        "--home",
        str(tmp_path / "home"),
        cwd=cwd or tmp_path,
        env=cli_env(tmp_path / "home", **env),
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
            ("dags", "--db", "postgresql://u@127.0.0.1:1/x?password=topsecret"),
            2,
            "--db postgresql://u@127.0.0.1:1/x?password=***: a password on the command line",
        ),
        (
            ("dags", "--db", "postgresql://u@127.0.0.1:1/x", "--db-file", "f"),
            2,
            "--db and --db-file: give one of them",
        ),
        (("dags", "--db-file", "missing"), 2, "--db-file missing: cannot read it: No such file or directory"),
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
        "from airflow_provider_agentloom.dag.loader import load_workflows\nload_workflows(globals())\n"
    )
    assert prepare.place_loader(tmp_path) == (theirs, False)
    assert sorted(p.name for p in tmp_path.glob("*.py")) == []


def test_serves_homes_are_made_private_and_another_users_is_refused(tmp_path: Path) -> None:
    home = ServeHome(tmp_path / "runner-home" / "serve")
    prepare.lock_home(home).close()
    for folder in (home.root.parent, home.root):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((home.root / "serve.lock").stat().st_mode) == 0o600
    if os.geteuid() == 0:
        os.chown(home.root, 4242, 4242)
        with pytest.raises(
            ServeError, match=r"the agentloom home .*/serve belongs to another user \(uid 4242"
        ):
            prepare.lock_home(home)


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
    monkeypatch.setenv("AGENTLOOM_SERVE_DB", "postgresql://u:topsecret@db/x")
    home = ServeHome(tmp_path / "serve")
    home.root.mkdir()

    env = prepare.component_environment(home, tmp_path / "dags", 18080, "postgresql://u:pw@db/y", "id1")

    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(tmp_path / "dags")
    assert env["AIRFLOW_HOME"] == str(home.root)
    assert env["AIRFLOW__CORE__PARALLELISM"] == "16"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == "postgresql://u:pw@db/y"  # in the environment only
    # Where the loader keeps the pools of model connections: this API, as serve's admin.
    assert json.loads(env["AIRFLOW_CONN_AGENTLOOM_AIRFLOW_API"]) == {
        "conn_type": "http",
        "host": "http://127.0.0.1:18080",
        "login": "admin",
        "password": prepare.login_password(home),
    }
    assert "AGENTLOOM_SERVE_DB" not in env
    assert (
        prepare.component_environment(home, tmp_path, 18080, None, "id1")[
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
        ]
        == f"sqlite:///{home.root / 'airflow.db'}"
    )
    # Private task logs (Airflow chmods them to these, whatever the umask), and no log server port
    # anything could listen on.
    assert env["AIRFLOW__LOGGING__FILE_TASK_HANDLER_NEW_FILE_PERMISSIONS"] == "0o600"
    assert env["AIRFLOW__LOGGING__FILE_TASK_HANDLER_NEW_FOLDER_PERMISSIONS"] == "0o700"
    assert (
        env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"]
        == env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"]
        == "0"
    )
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


def test_a_password_in_db_is_refused_with_the_way_to_give_it_and_is_never_shown(tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "one.yaml").write_text(WORKFLOW, encoding="utf-8")

    returncode, output = _serve(tmp_path, "dags", "--db", "postgresql://u:topsecret@127.0.0.1:1/x")

    assert returncode == 2, output
    assert (
        "--db postgresql://u:***@127.0.0.1:1/x: a password on the command line can be read by every" in output
    )
    assert "export AGENTLOOM_SERVE_DB='postgresql://USER:PASSWORD@HOST/DATABASE'" in output
    assert "--db-file PATH (chmod 600 PATH)" in output
    assert "PGPASSWORD or ~/.pgpass" in output
    assert "topsecret" not in output
    assert not (tmp_path / "home").exists(), "serve prepared a home though it refused its arguments"


@pytest.mark.parametrize("source", ["env", "file"])
def test_the_url_with_its_password_comes_from_the_environment_or_a_private_file(
    tmp_path: Path, source: str
) -> None:
    """Taken (serve tries to connect: port 1 refuses), named by where it came from, password hidden."""
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "one.yaml").write_text(WORKFLOW, encoding="utf-8")
    url = "postgresql://u:topsecret@127.0.0.1:1/x"
    if source == "env":
        returncode, output = _serve(tmp_path, "dags", AGENTLOOM_SERVE_DB=url)
        label = "$AGENTLOOM_SERVE_DB"
    else:
        db_file = tmp_path / "db.url"
        db_file.write_text(f"# the serve database\n{url}\n", encoding="utf-8")
        db_file.chmod(0o600)
        returncode, output = _serve(tmp_path, "dags", "--db-file", str(db_file))
        label = f"--db-file {db_file}"

    assert returncode == 1, output
    assert f"{label} postgresql://u:***@127.0.0.1:1/x: cannot connect: connection to server" in output
    assert "topsecret" not in output


def test_a_db_file_others_may_read_or_another_users_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "one.yaml").write_text(WORKFLOW, encoding="utf-8")
    db_file = tmp_path / "db.url"
    db_file.write_text("postgresql://u:topsecret@127.0.0.1:1/x\n", encoding="utf-8")
    db_file.chmod(0o640)

    returncode, output = _serve(tmp_path, "dags", "--db-file", str(db_file))

    assert returncode == 2, output
    assert (
        f"--db-file {db_file}: other users may read it (mode 0640), and it holds a password: chmod 600"
        in output
    )
    assert "topsecret" not in output
    if os.geteuid() == 0:
        db_file.chmod(0o600)
        os.chown(db_file, 4242, 4242)
        returncode, output = _serve(tmp_path, "dags", "--db-file", str(db_file))
        assert returncode == 2, output
        assert "the file belongs to another user (uid 4242)" in output
    empty = tmp_path / "empty.url"
    empty.write_text("# nothing yet\n\n", encoding="utf-8")
    empty.chmod(0o600)
    returncode, output = _serve(tmp_path, "dags", "--db-file", str(empty))
    assert (returncode, "the file holds no URL" in output) == (2, True), output
