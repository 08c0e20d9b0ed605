"""``DatabaseWrites``: the run loop's wake-up when the home's database is written."""

from __future__ import annotations

import select
import sqlite3
import sys
from pathlib import Path

import pytest

from airflow_provider_agentloom.runner.db_writes import DatabaseWrites

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")


def _readable(fd: int | None, timeout: float) -> bool:
    assert fd is not None
    return bool(select.select([fd], [], [], timeout)[0])


def test_a_commit_to_the_database_wakes_the_watcher_until_drained(tmp_path: Path) -> None:
    database = tmp_path / "airflow.db"
    writer = sqlite3.connect(database)
    writer.execute("PRAGMA journal_mode=WAL")  # as Airflow opens the home's database
    writer.execute("CREATE TABLE task_instance (state TEXT)")
    writer.commit()
    with DatabaseWrites(database) as writes:
        assert not _readable(writes.fileno(), 0)  # what came before the watch is not seen
        writer.execute("INSERT INTO task_instance VALUES ('success')")
        writer.commit()
        assert _readable(writes.fileno(), 10)
        writes.drain()
        assert not _readable(writes.fileno(), 0)
        # A read writes nothing: it wakes no one.
        assert sqlite3.connect(database).execute("SELECT state FROM task_instance").fetchall() == [
            ("success",)
        ]
        assert not _readable(writes.fileno(), 0.2)
        writer.execute("UPDATE task_instance SET state = 'failed'")
        writer.commit()
        assert _readable(writes.fileno(), 10)
    assert writes.fileno() is None
    writer.close()


def test_a_folder_that_cannot_be_watched_leaves_the_loop_polling(tmp_path: Path) -> None:
    with DatabaseWrites(tmp_path / "missing" / "airflow.db") as writes:
        assert writes.fileno() is None
        writes.drain()  # nothing to drain, no error
