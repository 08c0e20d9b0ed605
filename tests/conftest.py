"""Shared test set-up: a private Airflow home (SQLite) made before Airflow is imported, and a network guard.

The home is the runner's own kind (``prepare_home``), so ``dag.test()`` tests and runner tests
share one migrated database; it lives in a temporary folder for the session.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

# The signal tests press Ctrl-C (and send SIGHUP) as a terminal would. A suite started with those
# signals ignored (under `nohup`, or as a background job of a shell without job control) would
# hand that on to every process it starts, and each would then rightly carry on through them, as
# `agentloom run` does under `nohup`. The suite's processes start as from a terminal instead.
for _signum, _default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGHUP, signal.SIG_DFL)):
    if signal.getsignal(_signum) is signal.SIG_IGN:
        signal.signal(_signum, _default)

_HOME = Path(tempfile.mkdtemp(prefix="agentloom-test-home-"))
os.environ["AGENTLOOM_HOME"] = str(_HOME)
# The suite's processes keep their caches in a folder of its own, not the developer's ~/.cache:
# new homes' template database (runner/home.py, which also follows AGENTLOOM_TEMPLATES) and the
# benchmarks' caches. Made by the controller, inherited by its xdist workers and every process
# they start (even those that drop the AGENTLOOM_* variables), removed at the session's end.
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="agentloom-test-cache-")
_CACHE = Path(os.environ["XDG_CACHE_HOME"])
os.environ["AGENTLOOM_TEMPLATES"] = str(_CACHE / "agentloom" / "templates")
os.environ["AGENTLOOM_AIRFLOW_LOG_LEVEL"] = "INFO"  # task logs in dag.test() tests keep INFO lines
# The Python API runs in the test's process (its monkeypatches and network guard apply), unless
# a test asks for the warm runner (daemon=True); CLI processes choose through cli_env(warm=...).
os.environ["AGENTLOOM_NO_DAEMON"] = "1"
for _name in [n for n in os.environ if n.startswith("AIRFLOW")]:
    del os.environ[_name]

from airflow_provider_agentloom.runner.home import prepare_home  # noqa: E402

# Airflow's logging, set up as prepare_home first imports it, keeps the sys.stdout of that moment for
# good: here pytest's capture of the session's own output, which pytest prints after its summary
# line (a migration's ~35 lines, at the session's end). It gets a file of the session home instead.
_AIRFLOW_LOG = open(_HOME / "airflow-session.log", "a", encoding="utf-8")  # noqa: SIM115 - the session's
with contextlib.redirect_stdout(_AIRFLOW_LOG):
    HOME = prepare_home(_HOME)

if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from cli_support import is_outside_setting  # noqa: E402
from process_support import kill_marked, new_marker  # noqa: E402
from shared_paths import EXAMPLES, require_shared  # noqa: E402

# Fixed places the suite cannot move: the corpus examples name absolute paths (13:
# /tmp/agentloom-demo, 17 and 18: /tmp/agentloom), which is also the default working directory of a
# DAG built without one. What the session creates there is removed at its end, with its home.
_FIXED_PLACES = [Path(tempfile.gettempdir()) / "agentloom", Path(tempfile.gettempdir()) / "agentloom-demo"]
_FIXED_PLACES_BEFORE = {place for place in _FIXED_PLACES if os.path.lexists(place)}


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the warm runners the session used; remove its Airflow home and what it created in the
    fixed places."""
    from cli_support import WARM_HOMES

    from airflow_provider_agentloom.runner.warm import client

    # And the session home's, which a CLI started with the session's own environment would use.
    for home in sorted({*WARM_HOMES, _HOME.resolve()}):
        client.stop(home)
    shutil.rmtree(_HOME, ignore_errors=True)
    if hasattr(config, "workerinput"):
        return  # a pytest-xdist worker: the other worker may still use the fixed places
    shutil.rmtree(_CACHE, ignore_errors=True)
    for place in (p for p in _FIXED_PLACES if p not in _FIXED_PLACES_BEFORE):
        shutil.rmtree(place, ignore_errors=True)


# Under pytest-xdist, the tests that share one of these run on one worker, one group after another
# (``pytest_xdist_make_scheduler``): the live-stack modules run one Airflow stack at a time
# (``e2e/conftest.py``), and the example table's last test renders the rows run before it.
_ONE_WORKER_GROUPS = {"tests/e2e/": "live-stack", "tests/cli/test_examples_mock.py": "examples-table"}


def xdist_scope(nodeid: str) -> str:
    """The unit of work ``nodeid`` is sent to a worker in: a group above, its module, or itself.

    A module with a module- or class-scoped fixture is one unit, so its fixture is set up once (on
    one worker) rather than once on each; any other test is a unit of its own.
    """
    for prefix, group in _ONE_WORKER_GROUPS.items():
        if nodeid.startswith(prefix):
            return group
    module = nodeid.partition("::")[0]
    return module if _shares_fixtures(module) else nodeid


@functools.cache
def _shares_fixtures(module: str) -> bool:
    try:
        text = (ROOT / module).read_text(encoding="utf-8")
    except OSError:
        return False
    return 'scope="module"' in text or 'scope="class"' in text


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the one-worker groups come first (the longest units, started first)."""
    if not hasattr(config, "workerinput"):
        return
    order = list(_ONE_WORKER_GROUPS.values())
    items.sort(
        key=lambda item: order.index(scope) if (scope := xdist_scope(item.nodeid)) in order else len(order)
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist=loadscope`` (``pyproject.toml``) with :func:`xdist_scope` as its scope.

    Our own: pytest-xdist's ``loadgroup`` marks do not take with pytest 9.2 (it renames
    ``item._nodeid``, which ``Item.nodeid`` no longer reads).
    """
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return SharedFixtureScheduling(config, log)


def _is_loopback(address: Any) -> bool:
    if not isinstance(address, tuple):
        return True  # a Unix socket
    host = str(address[0])
    return host in ("localhost", "::1") or host.startswith(("127.", "::ffff:127."))


@pytest.fixture(autouse=True)
def _network_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse any connection that is not to this machine's loopback."""
    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> Any:
        if not _is_loopback(address):
            raise OSError(f"test network guard: connection to {address!r} refused")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    for name in [n for n in os.environ if is_outside_setting(n)]:
        monkeypatch.delenv(name)


@pytest.fixture
def examples_dir() -> Path:
    return require_shared(EXAMPLES)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary current directory ("the directory you run from")."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def warm_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One Airflow home for the session's CLI runs, served by its warm runner (``cli_env(warm_home,
    warm=True)``): the runner starts once, on the first run, and stops at the session's end.

    Its runner inherits the environment of the client that started it, so a test that checks the
    processes, signals or ``AIRFLOW__*`` settings of one CLI process keeps a home of its own, and one
    that reads the home's database finds its runs by run_id or by a workflow name of its own.
    """
    from airflow_provider_agentloom.runner.warm import client

    home = tmp_path_factory.mktemp("warm") / "home"
    yield home
    client.stop(home)


@pytest.fixture
def marker() -> Iterator[str]:
    """A new process marker (see ``process_support``); whatever still carries it at the end is killed."""
    value = new_marker()
    yield value
    kill_marked(value)
