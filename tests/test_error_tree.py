"""Every public exception class of the package is an ``AgentLoomError``: one tree, one ``except``.

The walk imports every module of the package (as a user's ``except AgentLoomError`` would meet
them) and lists the exception classes each defines; a control package with a stray class proves
the walk finds one. ``KeyboardInterrupt``-like classes (``runner.RunInterrupted``) are not
``Exception``\\s, and stay outside on purpose: ``except Exception`` must not swallow Ctrl-C.
"""

from __future__ import annotations

import importlib
import inspect
import pickle  # noqa: TID251 - checking that errors survive Airflow's process boundary
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import airflow_provider_agentloom
from airflow_provider_agentloom.exceptions import AgentLoomError, RunError


def exception_classes(package: ModuleType) -> dict[str, type[Exception]]:
    """``{"module.Class": class}`` of the public exception classes defined in each module of ``package``."""
    found: dict[str, type[Exception]] = {}
    modules = [package.__name__]
    modules += [info.name for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")]
    for name in modules:
        if name.rpartition(".")[2] == "__main__":  # running it is its whole job
            continue
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, Exception)
                and value.__module__ == name
                and not attr.startswith("_")
            ):
                found[f"{name}.{attr}"] = value
    return found


def outside(classes: dict[str, type[Exception]], root: type[Exception]) -> list[str]:
    return sorted(name for name, cls in classes.items() if not issubclass(cls, root))


PACKAGE_CLASSES = exception_classes(airflow_provider_agentloom)


def test_every_public_exception_class_is_an_agentloom_error() -> None:
    assert outside(PACKAGE_CLASSES, AgentLoomError) == []
    # The walk reached the corners the tree was drawn from, not only exceptions.py.
    for name in (
        "airflow_provider_agentloom.cli.errors.UsageError",
        "airflow_provider_agentloom.llm.errors.FixtureError",
        "airflow_provider_agentloom.runner.warm.protocol.RunnerUnavailable",
        "airflow_provider_agentloom.serve.prepare.ServeError",
        "airflow_provider_agentloom.tools.sandbox.hosts.HostError",
    ):
        assert name in PACKAGE_CLASSES


def test_the_walk_finds_a_class_outside_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    control = tmp_path / "stray_control"
    (control / "inner").mkdir(parents=True)
    (control / "__init__.py").write_text("")
    (control / "inner" / "__init__.py").write_text("")
    (control / "inner" / "errors.py").write_text(
        "from airflow_provider_agentloom.exceptions import AgentLoomError\n"
        "class Drawn(AgentLoomError, ValueError):\n    pass\n"
        "class Stray(RuntimeError):\n    pass\n"
        "class _Private(Exception):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    classes = exception_classes(importlib.import_module("stray_control"))
    assert sorted(classes) == ["stray_control.inner.errors.Drawn", "stray_control.inner.errors.Stray"]
    assert outside(classes, AgentLoomError) == ["stray_control.inner.errors.Stray"]


def test_runner_warm_and_serve_failures_are_run_errors() -> None:
    for name in (
        "runner.engine.RunNotResumable",
        "runner.approvals.GateAnswerError",
        "runner.home.HomeConflictError",
        "runner.processes.ApiServerError",
        "runner.warm.protocol.ProtocolError",
        "runner.warm.protocol.RunnerNotTrusted",
        "runner.warm.server.RunnerBusy",
        "runner.warm.shipping.Unshippable",
        "serve.prepare.ServeError",
        "serve.prepare.ServeUsageError",
    ):
        assert issubclass(PACKAGE_CLASSES[f"airflow_provider_agentloom.{name}"], RunError), name


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("tools.sandbox.hosts.HostError", ValueError),
        ("runner.warm.protocol.ProtocolError", RuntimeError),
        ("runner.warm.protocol.RunnerUnavailable", RuntimeError),
        ("runner.home.HomeConflictError", RuntimeError),
        ("runner.processes.ApiServerError", RuntimeError),
    ],
)
def test_a_class_drawn_in_keeps_the_builtin_base_its_callers_catch(name: str, builtin: type) -> None:
    cls = PACKAGE_CLASSES[f"airflow_provider_agentloom.{name}"]
    with pytest.raises(builtin):
        raise cls("caught as before")


def test_errors_pickle_across_processes() -> None:
    """Airflow's supervisor and the warm runner pass errors between processes."""
    checked = 0
    for name, cls in PACKAGE_CLASSES.items():
        try:
            error = cls("boom")
        except (TypeError, AttributeError):  # built from other arguments (its own __reduce__)
            continue
        again = pickle.loads(pickle.dumps(error))
        assert (type(again), str(again)) == (cls, str(error)), name
        checked += 1
    assert checked >= 20


def test_errors_built_from_other_arguments_pickle_them() -> None:
    from airflow_provider_agentloom.llm.base import StreamError
    from airflow_provider_agentloom.workflow.graph import GraphError, GraphIssue

    stream = pickle.loads(pickle.dumps(StreamError("overloaded", 529)))
    assert (str(stream), stream.status) == ("overloaded", 529)
    issue = GraphIssue(key_path="steps[0].depends_on", message="unknown step 'b'")
    graph = pickle.loads(pickle.dumps(GraphError([issue])))
    assert (graph.issues, str(graph)) == ([issue], "unknown step 'b'")
