"""The homes of ``agentloom run`` are private: another local user (uid 4242) reads nothing of a run.

A run's home holds its ``conf`` in the database and its task logs. After a real ``agentloom run``
every folder is 0700 and every file 0600, and uid 4242 gets EACCES on the database and the task
log, while a control file made world-readable in the same folders *is* read (so the reader can
see a leak). A home an older version made 0755/0644 is tightened on its next use, silently; a home
folder of another user is refused and left untouched. Serve's homes: ``tests/e2e/test_serve*.py``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cli_support import cli_env, run_cli
from privacy_support import OTHER_UID, assert_other_user_reads_none, can_play_other_user, loose_entries

from airflow_provider_agentloom import run_workflow
from airflow_provider_agentloom.exceptions import PrivateHomeError
from airflow_provider_agentloom.runner.private import ensure_private_home

needs_root = pytest.mark.skipif(not can_play_other_user(), reason="playing another user needs root")

CANARY = "canary-conf-7f3a91"
WORKFLOW = """\
name: private-home
state:
  note: nothing
steps:
  - id: echo_note
    type: tool
    tool_name: shell_command
    tool_args: {command: "echo note={state.note} > note.txt && cat note.txt"}
    output: echoed
"""


def _write_workflow(folder: Path) -> Path:
    path = folder / "private.yaml"
    path.write_text(WORKFLOW, encoding="utf-8")
    return path


@needs_root
@pytest.mark.timeout(240)
def test_a_run_leaves_a_private_home_that_another_user_cannot_read(tmp_path: Path) -> None:
    """The default home (``~/.cache/agentloom/airflow-home``) and the template cache beside it."""
    world = tmp_path / "world"  # the folder the other user is let into (0711)
    user = world / "user"  # $HOME: 0755, as many are
    work = world / "work"
    for folder in (world, user, work):
        folder.mkdir(mode=0o755)
    workflow = _write_workflow(work)
    env = cli_env(tmp_path / "unused")
    for name in ("AGENTLOOM_HOME", "XDG_CACHE_HOME", "AGENTLOOM_TEMPLATES"):
        env.pop(name, None)
    cache = user / ".cache" / "agentloom"
    home = cache / "airflow-home"
    env.update(HOME=str(user), AIRFLOW_HOME=str(home))

    done = run_cli("run", str(workflow), "--state", f"note={CANARY}", "--json", cwd=work, env=env)

    assert done.returncode == 0, done.stderr
    # What another user would be after: the run's conf, in the database and in the task log.
    database = [path for path in home.glob("airflow.db*") if CANARY.encode() in path.read_bytes()]
    assert database, "the run's conf is not in the database files (the test would prove nothing)"
    (task_log,) = home.glob("logs/dag_id=private-home/run_id=*/task_id=echo_note/attempt=1.log")
    assert CANARY in task_log.read_text(encoding="utf-8")
    assert loose_entries(user / ".cache") == [], "a folder that is not 0700 or a file others may read"
    # The step's own output keeps the user's umask (022 here): only the home is private.
    assert stat.S_IMODE((work / "note.txt").stat().st_mode) == 0o644 & ~_umask()

    assert_other_user_reads_none(
        world, [*database, task_log, home / ".jwt_secret", *cache.glob("templates/*.db")]
    )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_home_made_by_an_older_version_is_tightened_on_use_silently(tmp_path: Path) -> None:
    home = tmp_path / "old-home"
    (home / "logs" / "dag_id=x").mkdir(parents=True, mode=0o755)
    for path in (home, home / "logs", home / "logs" / "dag_id=x"):
        path.chmod(0o755)
    for name in ("old-notes.txt", "logs/supervisors.log", "logs/dag_id=x/attempt=1.log"):
        (home / name).write_text("old\n")
        (home / name).chmod(0o644)
    (home / "script.sh").write_text("#!/bin/sh\n")
    (home / "script.sh").chmod(0o755)
    outside = tmp_path / "outside.txt"  # a link in the home is not followed out of it
    outside.write_text("not the home's\n")
    outside.chmod(0o644)
    (home / "link").symlink_to(outside)
    assert len(loose_entries(home)) == 7  # control: the walk sees what an older version left

    done = run_cli("runs", "--home", str(home), env=cli_env(home))

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "No runs found."
    assert done.stderr == "", "tightening a home says nothing"
    assert loose_entries(home) == []
    assert stat.S_IMODE((home / "script.sh").stat().st_mode) == 0o700  # the owner's bits are kept
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644


@needs_root
def test_a_home_of_another_user_is_refused_and_left_untouched(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o755)
    workflow = _write_workflow(tmp_path)

    refused = [
        run_cli("run", str(workflow), "--home", str(theirs), env=cli_env(theirs)),  # in this process
        run_cli("run", str(workflow), "--home", str(theirs), env=cli_env(theirs, warm=True)),
        run_cli("runs", "--home", str(theirs), env=cli_env(theirs)),
    ]
    for done in refused:
        assert done.returncode == 1, done.stderr
        assert f"the agentloom home {theirs} belongs to another user (uid {OTHER_UID}" in done.stderr
        assert "choose a folder of your own (--home DIR or AGENTLOOM_HOME)" in done.stderr
        assert "Traceback" not in done.stderr
    for daemon in (False, True):
        with pytest.raises(PrivateHomeError, match="belongs to another user"):
            run_workflow(workflow, home=theirs, daemon=daemon)
    assert list(theirs.iterdir()) == [], "something was written in another user's home"
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o755

    # Control: the same folder, ours, is used (and made private).
    used = run_cli("runs", "--home", str(ours), env=cli_env(ours))
    assert used.returncode == 0, used.stderr
    assert (ours / "airflow.db").is_file()
    assert stat.S_IMODE(ours.stat().st_mode) == 0o700


def test_a_new_home_and_the_folders_made_for_it_are_0700(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "home"
    ensure_private_home(root)
    assert [oct(stat.S_IMODE(p.stat().st_mode)) for p in (tmp_path / "a", tmp_path / "a" / "b", root)] == [
        "0o700"
    ] * 3
    (tmp_path / "file").write_text("")
    with pytest.raises(PrivateHomeError, match="is not a folder"):
        ensure_private_home(tmp_path / "file")
