"""``combine_sandboxes``: the sandbox a subworkflow runs under (seed page, "Subworkflows")."""

from __future__ import annotations

from typing import Any

import pytest
from tools_support import FakeResolver, Tree

from airflow_provider_agentloom.exceptions import SandboxViolationError
from airflow_provider_agentloom.tools.sandbox.policy import ToolSandbox, combine_sandboxes
from airflow_provider_agentloom.workflow.models import SandboxConfig


def cfg(**fields: Any) -> SandboxConfig:
    return SandboxConfig(**fields)


def combined(tree: Tree, parent: SandboxConfig, child: SandboxConfig, **extra: Any) -> ToolSandbox:
    result = combine_sandboxes(parent, child, base_dir=tree.base)
    return ToolSandbox.from_config(result, base_dir=tree.base, **extra)


# | Parent | Child | The child runs under |
TABLE = [
    pytest.param(False, False, "child", id="disabled-disabled-own-block"),
    pytest.param(True, False, "parent", id="enabled-disabled-parent"),
    pytest.param(False, True, "child", id="disabled-enabled-own"),
]


@pytest.mark.parametrize(("parent_on", "child_on", "expected"), TABLE)
def test_one_side_disabled(parent_on: bool, child_on: bool, expected: str) -> None:
    parent = cfg(enabled=parent_on, allowed_commands=["ls"], allowed_domains=["p.example"])
    child = cfg(enabled=child_on, allowed_commands=["wc"], max_write_bytes=5)
    result = combine_sandboxes(parent, child)
    assert result == (parent if expected == "parent" else child)
    assert result is not parent
    assert result is not child


def test_both_disabled_leave_the_tools_unlimited(tree: Tree) -> None:
    sandbox = combined(tree, cfg(), cfg(allow_network=False))
    sandbox.validate_command("bash -c 'anything | goes'", cwd="/")
    sandbox.validate_path("/etc/hostname")


def test_both_enabled_is_an_intersection(tree: Tree) -> None:
    parent = cfg(enabled=True, allowed_commands=["ls", "wc", "bash"], danger_opt_in=["bash"])
    child = cfg(enabled=True, allowed_commands=["wc", "grep", "bash"], danger_opt_in=[])
    result = combine_sandboxes(parent, child, base_dir=tree.base)
    assert result.enabled
    assert result.allowed_commands == ["wc", "bash"]  # on both lists
    assert result.danger_opt_in == []  # bash is opted in by the parent only


DIRECTORY_CASES = [
    # parent fields, child fields, allowed_paths, readable_paths, writable_paths (relative to base)
    pytest.param({"allowed_paths": ["data"]}, {"allowed_paths": ["data"]}, ["data"], [], [], id="same"),
    pytest.param(
        {"allowed_paths": ["data"]}, {"allowed_paths": ["data/sub"]}, ["data/sub"], [], [], id="child-deeper"
    ),
    pytest.param(
        {"allowed_paths": ["data/sub"]}, {"allowed_paths": ["data"]}, ["data/sub"], [], [], id="parent-deeper"
    ),
    pytest.param({"allowed_paths": ["data"]}, {"allowed_paths": ["out"]}, [], [], [], id="disjoint"),
    pytest.param(
        {"allowed_paths": ["data"]}, {"readable_paths": ["data"]}, [], ["data"], [], id="child-only-reads"
    ),
    pytest.param(
        {"readable_paths": ["data"], "writable_paths": ["out"]},
        {"allowed_paths": ["data", "out"]},
        [],
        ["data"],
        ["out"],
        id="parent-splits",
    ),
    pytest.param(
        {"writable_paths": ["out"]}, {"readable_paths": ["out"]}, [], [], [], id="write-vs-read-nothing"
    ),
    pytest.param(
        {"allowed_paths": ["."]},
        {"readable_paths": ["data"], "writable_paths": ["out/x"]},
        [],
        ["data"],
        ["out/x"],
        id="root-parent",
    ),
]


@pytest.mark.parametrize(("parent", "child", "allowed", "readable", "writable"), DIRECTORY_CASES)
def test_directories(
    tree: Tree,
    parent: dict[str, Any],
    child: dict[str, Any],
    allowed: list[str],
    readable: list[str],
    writable: list[str],
) -> None:
    result = combine_sandboxes(cfg(enabled=True, **parent), cfg(enabled=True, **child), base_dir=tree.base)

    def absolute(paths: list[str]) -> list[str]:
        return [str((tree.base / p).resolve()) for p in paths]

    assert result.allowed_paths == absolute(allowed)
    assert result.readable_paths == absolute(readable)
    assert result.writable_paths == absolute(writable)


def test_a_directory_must_be_readable_under_both(tree: Tree) -> None:
    parent = cfg(enabled=True, readable_paths=["data"], writable_paths=["out"])
    child = cfg(enabled=True, allowed_paths=["."])
    sandbox = combined(tree, parent, child)
    sandbox.validate_path("data/notes.txt")
    sandbox.validate_path("out/x", writable=True)
    with pytest.raises(SandboxViolationError, match="only writable"):
        sandbox.validate_path("out/old.txt")  # the child's "." does not widen the parent's write-only out
    with pytest.raises(SandboxViolationError):
        sandbox.validate_path("data/x", writable=True)
    with pytest.raises(SandboxViolationError):
        sandbox.validate_path("secret/key.txt")


def test_no_shared_directory_means_no_file_access(tree: Tree) -> None:
    sandbox = combined(
        tree, cfg(enabled=True, allowed_paths=["data"]), cfg(enabled=True, allowed_paths=["out"])
    )
    with pytest.raises(SandboxViolationError, match="no file access"):
        sandbox.validate_path("data/notes.txt")


DOMAIN_CASES = [
    # parent domains, child domains, resulting domains, allow_network, deny_internal_hosts
    pytest.param([], [], [], True, False, id="both-empty-no-limit"),
    pytest.param(["a.example"], [], ["a.example"], True, False, id="child-empty"),
    pytest.param([], ["a.example"], ["a.example"], True, True, id="parent-empty-child-lists-deny-internal"),
    pytest.param(
        ["a.example", "b.example"], ["B.EXAMPLE", "c.example"], ["b.example"], True, False, id="shared"
    ),
    pytest.param(["a.example"], ["c.example"], [], False, False, id="nothing-in-common-refuses-all"),
]


@pytest.mark.parametrize(("parent", "child", "domains", "network", "deny"), DOMAIN_CASES)
def test_domains(parent: list[str], child: list[str], domains: list[str], network: bool, deny: bool) -> None:
    result = combine_sandboxes(
        cfg(enabled=True, allowed_domains=parent), cfg(enabled=True, allowed_domains=child)
    )
    assert result.allowed_domains == domains
    assert result.allow_network is network
    assert result.deny_internal_hosts is deny


SCHEME_CASES = [
    pytest.param(["http", "https"], ["https"], ["https"], True, id="child-narrows"),
    pytest.param(["https"], ["http", "https"], ["https"], True, id="child-cannot-widen"),
    pytest.param([], ["https"], ["https"], True, id="parent-empty-no-limit"),
    pytest.param(["http"], ["https"], [], False, id="nothing-in-common"),
    pytest.param(["HTTPS"], ["https"], ["HTTPS"], True, id="any-case"),
]


@pytest.mark.parametrize(("parent", "child", "schemes", "network"), SCHEME_CASES)
def test_schemes(parent: list[str], child: list[str], schemes: list[str], network: bool) -> None:
    result = combine_sandboxes(
        cfg(enabled=True, allowed_schemes=parent), cfg(enabled=True, allowed_schemes=child)
    )
    assert result.allowed_schemes == schemes
    assert result.allow_network is network


def test_a_child_list_cannot_open_internal_hosts(tree: Tree) -> None:
    resolver = FakeResolver({"intranet.corp": ["10.1.2.3"], "api.example.com": ["93.184.216.34"]})
    child = cfg(enabled=True, allowed_domains=["intranet.corp", "api.example.com"])
    alone = ToolSandbox.from_config(child, base_dir=tree.base, resolver=resolver)
    assert alone.validate_network("http://intranet.corp/").addresses == ("10.1.2.3",)
    sandbox = combined(tree, cfg(enabled=True), child, resolver=resolver)
    with pytest.raises(SandboxViolationError, match="internal address"):
        sandbox.validate_network("http://intranet.corp/")
    assert sandbox.validate_network("http://api.example.com/").pinned


def test_disjoint_domains_refuse_every_request(tree: Tree) -> None:
    resolver = FakeResolver({"a.example": ["93.184.216.34"], "c.example": ["93.184.216.35"]})
    sandbox = combined(
        tree,
        cfg(enabled=True, allowed_domains=["a.example"]),
        cfg(enabled=True, allowed_domains=["c.example"]),
        resolver=resolver,
    )
    for host in ("a.example", "c.example", "other.example"):
        with pytest.raises(SandboxViolationError):
            sandbox.validate_network(f"https://{host}/")


FLAG_CASES = [
    pytest.param("allow_network", True, True, True, id="network-both"),
    pytest.param("allow_network", True, False, False, id="network-child-off"),
    pytest.param("allow_network", False, True, False, id="network-parent-off"),
    pytest.param("allow_internal_webhook_targets", True, True, True, id="webhook-both"),
    pytest.param("allow_internal_webhook_targets", True, False, False, id="webhook-child-off"),
    pytest.param("allow_internal_webhook_targets", False, True, False, id="webhook-parent-off"),
    pytest.param("deny_internal_hosts", True, False, True, id="deny-parent"),
    pytest.param("deny_internal_hosts", False, True, True, id="deny-child"),
]


@pytest.mark.parametrize(("name", "parent", "child", "expected"), FLAG_CASES)
def test_flags_must_be_true_in_both(name: str, parent: bool, child: bool, expected: bool) -> None:
    result = combine_sandboxes(cfg(enabled=True, **{name: parent}), cfg(enabled=True, **{name: child}))
    assert getattr(result, name) is expected


@pytest.mark.parametrize(
    ("parent", "child", "expected"),
    [(None, None, None), (100, None, 100), (None, 50, 50), (100, 50, 50), (10, 50, 10), (0, 50, 0)],
)
def test_the_smaller_max_write_bytes_applies(
    parent: int | None, child: int | None, expected: int | None
) -> None:
    result = combine_sandboxes(
        cfg(enabled=True, max_write_bytes=parent), cfg(enabled=True, max_write_bytes=child)
    )
    assert result.max_write_bytes == expected


def test_combining_never_widens_commands(tree: Tree) -> None:
    parent = cfg(enabled=True, allowed_commands=["ls"], readable_paths=["data"])
    child = cfg(enabled=True, allowed_commands=["ls", "cat"], readable_paths=["data"])
    sandbox = combined(tree, parent, child)
    sandbox.validate_command("ls", cwd="data")
    with pytest.raises(SandboxViolationError, match="'cat' is not in allowed_commands"):
        sandbox.validate_command("cat notes.txt", cwd="data")
