"""``file_read`` and ``file_write``: every row of the seed page's table, with and without the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools_support import Tree

from airflow_provider_agentloom.exceptions import SandboxViolationError, ToolError
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import (
    FileReadTool,
    FileWriteTool,
    HttpRequestTool,
    ShellCommandTool,
    register_builtins,
)
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.sandbox import ToolSandbox

pytestmark = pytest.mark.anyio


def registry_for(base: Path, sandbox: ToolSandbox | None = None) -> ToolRegistry:
    registry = ToolRegistry()
    register_builtins(registry, sandbox, base_dir=None if sandbox is not None else base)
    return registry


# -------------------------------------------------------------------------------- registration


def test_register_builtins_registers_the_four_tools(tmp_path: Path) -> None:
    registry = ToolRegistry()
    tools = register_builtins(registry, base_dir=tmp_path)
    assert registry.names() == ["file_read", "file_write", "http_request", "shell_command"]
    assert [type(t) for t in tools] == [HttpRequestTool, ShellCommandTool, FileReadTool, FileWriteTool]
    assert all(t.sandbox is None for t in tools)  # type: ignore[attr-defined]
    schemas = {t.name: t.parameters_schema for t in tools}
    assert schemas["file_write"]["required"] == ["path", "content"]
    assert schemas["http_request"]["properties"]["method"]["enum"] == ["GET", "POST", "PUT", "DELETE"]
    assert schemas["shell_command"]["properties"]["timeout"]["default"] == 30.0


def test_register_builtins_takes_the_sandbox_base_dir(tree: Tree) -> None:
    sandbox = tree.sandbox()
    tools = register_builtins(ToolRegistry(), sandbox)
    assert all(t.base_dir == str(tree.base) for t in tools)  # type: ignore[attr-defined]
    register_builtins(ToolRegistry(), sandbox, base_dir=tree.base)  # the same directory is fine
    with pytest.raises(ValueError, match="differs from the sandbox"):
        register_builtins(ToolRegistry(), sandbox, base_dir=tree.data)


# ------------------------------------------------------------------------------------ file_write


async def test_written_counts_bytes_in_the_encoding(tmp_path: Path) -> None:
    registry = registry_for(tmp_path)
    result = await invoke_tool(registry, "file_write", {"path": "n.txt", "content": "ññ"})
    assert result == {"written": 4, "path": str(tmp_path / "n.txt")}
    assert (tmp_path / "n.txt").read_bytes() == "ññ".encode()
    latin = await invoke_tool(
        registry, "file_write", {"path": "l.txt", "content": "ññ", "encoding": "latin-1"}
    )
    assert latin["written"] == 2
    assert (tmp_path / "l.txt").read_bytes() == b"\xf1\xf1"
    utf16 = await invoke_tool(
        registry, "file_write", {"path": "u.txt", "content": "ab", "encoding": "utf-16"}
    )
    assert utf16["written"] == 6  # BOM + two code units


async def test_write_keeps_newlines_as_written(tmp_path: Path) -> None:
    result = await invoke_tool(registry_for(tmp_path), "file_write", {"path": "n.txt", "content": "a\r\nb\n"})
    assert result["written"] == 5
    assert (tmp_path / "n.txt").read_bytes() == b"a\r\nb\n"


async def test_write_creates_missing_parents(tmp_path: Path) -> None:
    result = await invoke_tool(registry_for(tmp_path), "file_write", {"path": "a/b/c/x.txt", "content": "x"})
    assert Path(result["path"]).read_text(encoding="utf-8") == "x"


async def test_write_replaces_an_existing_file(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("a much longer old content", encoding="utf-8")
    await invoke_tool(registry_for(tmp_path), "file_write", {"path": "x.txt", "content": "new"})
    assert (tmp_path / "x.txt").read_text(encoding="utf-8") == "new"


@pytest.mark.parametrize("content", [123, 1.5, True, ["a"], {"a": 1}, b"bytes"])
async def test_content_must_be_a_string(tmp_path: Path, content: object) -> None:
    with pytest.raises(ToolError, match=r"Tool 'file_write' failed: .*'content' must be a string"):
        await invoke_tool(registry_for(tmp_path), "file_write", {"path": "x.txt", "content": content})
    assert not (tmp_path / "x.txt").exists()


async def test_write_needs_path_and_content(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="missing required argument"):
        await invoke_tool(registry_for(tmp_path), "file_write", {"path": "x.txt"})
    with pytest.raises(ToolError, match="unexpected argument"):
        await invoke_tool(registry_for(tmp_path), "file_write", {"path": "x", "content": "", "mode": "a"})


async def test_write_with_unknown_encoding_fails(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="unknown encoding"):
        await invoke_tool(
            registry_for(tmp_path), "file_write", {"path": "x", "content": "a", "encoding": "nope"}
        )


async def test_relative_paths_start_from_base_dir_not_the_process_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, elsewhere = tmp_path / "base", tmp_path / "elsewhere"
    base.mkdir()
    elsewhere.mkdir()
    registry = registry_for(base)
    monkeypatch.chdir(elsewhere)
    await invoke_tool(registry, "file_write", {"path": "x.txt", "content": "here"})
    assert (base / "x.txt").exists()
    assert not (elsewhere / "x.txt").exists()
    assert await invoke_tool(registry, "file_read", {"path": "x.txt"}) == "here"


# ------------------------------------------------------------------------------------- file_read


async def test_read_returns_the_whole_file_as_text(tmp_path: Path) -> None:
    text = "line one\nñ second line\n" * 1000
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    assert await invoke_tool(registry_for(tmp_path), "file_read", {"path": "t.txt"}) == text


async def test_read_with_an_encoding(tmp_path: Path) -> None:
    (tmp_path / "l.txt").write_bytes(b"\xf1and\xfa")
    assert await invoke_tool(
        registry_for(tmp_path), "file_read", {"path": "l.txt", "encoding": "latin-1"}
    ) == ("ñandú")


@pytest.mark.parametrize(
    ("data", "encoding", "reason"),
    [
        pytest.param(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "utf-8", "is not utf-8 text", id="png"),
        pytest.param(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "latin-1", "is a binary file", id="png-latin1"),
        pytest.param(b"text then a NUL \x00 byte", "utf-8", "is a binary file", id="nul-byte"),
        pytest.param(b"\xff\xfe\xfa not utf-8", "utf-8", "is not utf-8 text", id="invalid-utf8"),
        pytest.param(b"\x7fELF\x02\x01\x01\x00\x00", "ascii", "is not ascii text|binary", id="elf-ascii"),
    ],
)
async def test_read_of_a_binary_file_fails(tmp_path: Path, data: bytes, encoding: str, reason: str) -> None:
    (tmp_path / "b.bin").write_bytes(data)
    with pytest.raises(ToolError, match=f"Tool 'file_read' failed: .*({reason})"):
        await invoke_tool(registry_for(tmp_path), "file_read", {"path": "b.bin", "encoding": encoding})


async def test_read_of_utf16_text_is_not_taken_for_binary(tmp_path: Path) -> None:
    (tmp_path / "u.txt").write_bytes("wide text ñ".encode("utf-16"))
    result = await invoke_tool(registry_for(tmp_path), "file_read", {"path": "u.txt", "encoding": "utf-16"})
    assert result == "wide text ñ"


async def test_read_of_a_missing_file_fails(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="Tool 'file_read' failed: .*No such file"):
        await invoke_tool(registry_for(tmp_path), "file_read", {"path": "missing.txt"})


async def test_read_of_a_directory_fails(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="Tool 'file_read' failed"):
        await invoke_tool(registry_for(tmp_path), "file_read", {"path": "."})


async def test_read_of_an_empty_file_is_empty_text(tmp_path: Path) -> None:
    (tmp_path / "e.txt").write_bytes(b"")
    assert await invoke_tool(registry_for(tmp_path), "file_read", {"path": "e.txt"}) == ""


async def test_read_path_must_be_given(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="missing required argument"):
        await invoke_tool(registry_for(tmp_path), "file_read", {})
    with pytest.raises(ToolError, match="'path' must be a string"):
        await invoke_tool(registry_for(tmp_path), "file_read", {"path": 5})


# ----------------------------------------------------------------------------- with the sandbox


async def test_without_sandbox_the_file_tools_have_no_limits(tree: Tree) -> None:
    registry = registry_for(tree.base)
    assert await invoke_tool(registry, "file_read", {"path": "secret/key.txt"}) == "top secret\n"
    assert await invoke_tool(registry, "file_read", {"path": "data/link_out"}) == "top secret\n"


async def test_disabled_sandbox_has_no_limits(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox(enabled=False, max_write_bytes=1))
    assert await invoke_tool(registry, "file_read", {"path": "secret/key.txt"}) == "top secret\n"
    result = await invoke_tool(registry, "file_write", {"path": "secret/new.txt", "content": "long"})
    assert result["written"] == 4


async def test_sandboxed_read_and_write_inside_the_lists(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox())
    assert await invoke_tool(registry, "file_read", {"path": "data/notes.txt"}) == "hello notes\n"
    assert await invoke_tool(registry, "file_read", {"path": "data/link_in"}) == "hello notes\n"
    result = await invoke_tool(registry, "file_write", {"path": "out/new/x.txt", "content": "ok"})
    assert result == {"written": 2, "path": str(tree.out / "new" / "x.txt")}


async def test_refused_read_is_a_sandbox_violation(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox())
    with pytest.raises(SandboxViolationError, match=r"^Sandbox violation \(file_read\): "):
        await invoke_tool(registry, "file_read", {"path": "data/link_out"})
    with pytest.raises(SandboxViolationError, match="only writable"):
        await invoke_tool(registry, "file_read", {"path": "out/old.txt"})


async def test_refused_write_leaves_nothing_behind(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox())
    with pytest.raises(SandboxViolationError, match=r"^Sandbox violation \(file_write\): "):
        await invoke_tool(registry, "file_write", {"path": "data/new/dir/x.txt", "content": "x"})
    assert not (tree.data / "new").exists()
    with pytest.raises(SandboxViolationError):
        await invoke_tool(registry, "file_write", {"path": "data/link_dir_out/planted.txt", "content": "x"})
    assert not (tree.secret / "planted.txt").exists()


async def test_max_write_bytes_counts_encoded_bytes(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox(max_write_bytes=3))
    with pytest.raises(SandboxViolationError, match=r"writing 4 bytes exceeds max_write_bytes \(3\)"):
        await invoke_tool(registry, "file_write", {"path": "out/n.txt", "content": "ññ"})  # 2 characters
    assert not (tree.out / "n.txt").exists()
    assert (await invoke_tool(registry, "file_write", {"path": "out/n.txt", "content": "abc"}))[
        "written"
    ] == 3


async def test_no_path_lists_means_no_file_access(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox(allowed_paths=[], readable_paths=[], writable_paths=[]))
    with pytest.raises(SandboxViolationError, match="no file access"):
        await invoke_tool(registry, "file_read", {"path": "data/notes.txt"})
    with pytest.raises(SandboxViolationError, match="no file access"):
        await invoke_tool(registry, "file_write", {"path": "out/x.txt", "content": "x"})
