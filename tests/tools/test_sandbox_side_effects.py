"""A refused call does nothing: no process starts, no file is written, no connection is opened."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools_support import FakeResolver, LoopbackServer, Tree

from airflow_provider_agentloom.exceptions import SandboxViolationError
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.invoke import invoke_tool

pytestmark = pytest.mark.anyio


def registry_on(tree: Tree, **fields: object) -> ToolRegistry:
    registry = ToolRegistry()
    register_builtins(registry, tree.sandbox(**fields))
    return registry


# Each command would create the marker if any process ran; each is refused by a different rule.
REFUSED_COMMANDS = [
    pytest.param("touch {marker}", ".", "working directory", id="rule-1-directory"),
    pytest.param("touch ../out/ok; touch {marker}", "data", "shell operator", id="rule-2-operator"),
    pytest.param("touch ../out/ok && touch {marker}", "data", "shell operator", id="rule-2-and"),
    pytest.param("touch {marker}$IFS", "data", "shell expansion", id="rule-3-expansion"),
    pytest.param("touch {{{marker},x}}", "data", "shell expansion", id="rule-3-brace-list"),
    pytest.param("mkdir {marker}", "data", "not in allowed_commands", id="rule-4-program"),
    pytest.param("./touch {marker}", "data", "found on PATH", id="rule-4-path-program"),
    pytest.param("sh -c 'touch {marker}'", "data", "interpreter or launcher", id="rule-5-interpreter"),
    pytest.param("find . -exec touch {marker} ;", "data", "shell operator", id="rule-5-find-operator"),
    pytest.param("find . -newer {marker}", "data", "interpreter or launcher", id="rule-5-find"),
    pytest.param("touch {marker}", "data", "path argument", id="rule-6-path"),
]


@pytest.mark.parametrize(("command", "cwd", "reason"), REFUSED_COMMANDS)
async def test_refused_command_starts_no_process(tree: Tree, command: str, cwd: str, reason: str) -> None:
    marker = tree.secret / "marker"
    (tree.data / "touch").write_text(f"#!/bin/sh\necho ran > {marker}\n", encoding="utf-8")
    (tree.data / "touch").chmod(0o755)
    registry = registry_on(tree, allowed_commands=["touch", "find", "sh"])
    with pytest.raises(SandboxViolationError, match=reason):
        await invoke_tool(registry, "shell_command", {"command": command.format(marker=marker), "cwd": cwd})
    assert not marker.exists()
    assert not (tree.out / "ok").exists()


async def test_allowed_command_does_run(tree: Tree) -> None:
    # The control: the same tool and sandbox really run an allowed command.
    registry = registry_on(tree, allowed_commands=["touch"])
    result = await invoke_tool(registry, "shell_command", {"command": "touch ../out/made", "cwd": "data"})
    assert result["returncode"] == 0
    assert (tree.out / "made").exists()


async def test_refused_write_creates_no_file_and_no_directory(tree: Tree) -> None:
    registry = registry_on(tree, max_write_bytes=2)
    attempts = [
        ({"path": "secret/new/x.txt", "content": "x"}, "outside the writable"),
        ({"path": "data/x.txt", "content": "x"}, "outside the writable"),
        ({"path": "out/too/big.txt", "content": "abc"}, "max_write_bytes"),
        ({"path": "data/link_dir_out/x.txt", "content": "x"}, "outside the writable"),
    ]
    before = sorted(p for p in tree.base.rglob("*"))
    for args, reason in attempts:
        with pytest.raises(SandboxViolationError, match=reason):
            await invoke_tool(registry, "file_write", args)
    assert sorted(p for p in tree.base.rglob("*")) == before


async def test_refused_read_reads_nothing(tree: Tree) -> None:
    registry = registry_on(tree)
    with pytest.raises(SandboxViolationError) as info:
        await invoke_tool(registry, "file_read", {"path": "secret/key.txt"})
    assert "top secret" not in str(info.value)


@pytest.mark.parametrize(
    ("host", "fields", "reason"),
    [
        pytest.param("127.0.0.1", {}, "internal address", id="loopback-literal"),
        pytest.param("127.1", {}, "internal address", id="short-form"),
        pytest.param("0x7f000001", {}, "internal address", id="hex"),
        pytest.param("2130706433", {}, "internal address", id="decimal"),
        pytest.param("[::ffff:127.0.0.1]", {}, "internal address", id="mapped"),
        pytest.param("localhost", {}, "internal address", id="localhost"),
        pytest.param("rebind.test", {}, "internal address", id="name-resolving-to-loopback"),
        pytest.param("unknown.test", {}, "does not resolve", id="unresolvable"),
        pytest.param("127.0.0.1", {"allow_network": False, "allowed_domains": ["127.0.0.1"]}, "allow_network",
                     id="network-off"),
        pytest.param("127.0.0.1", {"allowed_domains": ["api.example.com"]}, "not in allowed_domains",
                     id="unlisted"),
        pytest.param("127.0.0.1", {"allowed_domains": ["127.0.0.1"], "deny_internal_hosts": True},
                     "internal address", id="deny-internal"),
        pytest.param("127.0.0.1", {"allowed_schemes": ["https"]}, "scheme 'http'", id="scheme"),
    ],
)  # fmt: skip
async def test_refused_request_opens_no_connection(
    tree: Tree, server: LoopbackServer, host: str, fields: dict[str, object], reason: str
) -> None:
    resolver = FakeResolver({"rebind.test": ["127.0.0.1"]})
    registry = registry_on(tree, resolver=resolver, **fields)
    with pytest.raises(SandboxViolationError, match=reason):
        await invoke_tool(registry, "http_request", {"url": f"http://{host}:{server.port}/echo"})
    assert server.recorded.connections == []
    assert server.recorded.requests == []


def test_marker_path_is_really_outside(tree: Tree) -> None:
    assert not Path(tree.secret).is_relative_to(tree.data)
