"""``file_read`` and ``file_write`` open what the sandbox checked: a link swapped in meanwhile never leads out.

Deterministic tests swap a directory for a link to ``secret/`` between the check and the open;
a stress test flips links from another process while thousands of reads and writes run. Both run
with ``openat2`` and with the component-by-component walk used where ``openat2`` is missing.
"""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import RunTree, make_tree, registry

from airflow_provider_agentloom.exceptions import SandboxViolationError
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.sandbox import safe_open as _safe_open

pytestmark = pytest.mark.anyio

MODES = [pytest.param(True, id="openat2"), pytest.param(False, id="walk")]


@pytest.fixture(params=MODES)
def use_openat2(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run with openat2, or as on a kernel (or seccomp filter) without it."""
    if request.param and not _safe_open.openat2_available():
        pytest.skip("this kernel has no openat2")
    if not request.param:
        monkeypatch.setattr(_safe_open, "openat2_available", lambda: False)
    return bool(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> RunTree:
    tree = make_tree(tmp_path)
    for root in (tree.data, tree.out):
        (root / "inside").mkdir()
        (root / "inside" / "f.txt").write_text("inside\n", encoding="utf-8")
    (tree.secret / "f.txt").write_text("SECRET\n", encoding="utf-8")
    return tree


def swap_for_link_to_secret(directory: Path, secret: Path) -> None:
    """What a concurrent process may do after the check: put a link to ``secret`` in its place."""
    directory.rename(directory.with_name("moved-away"))
    directory.symlink_to(os.path.relpath(secret, directory.parent))


def secret_files(tree: RunTree) -> list[str]:
    return sorted(p.name for p in tree.secret.iterdir())


def leftovers(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.tmp"))


# ----------------------------------------------------------------------------- between check and open


def test_the_swap_is_a_real_escape_for_a_plain_open(tree: RunTree) -> None:
    # The control: what the tools did before, re-opening the checked path by name, lands in secret/.
    checked = tree.sandbox().validate_path("data/inside/f.txt")
    swap_for_link_to_secret(tree.data / "inside", tree.secret)
    assert checked.read_text(encoding="utf-8") == "SECRET\n"


def test_read_after_a_swap_is_refused(tree: RunTree, use_openat2: bool) -> None:
    checked = tree.sandbox().validate_path("data/inside/f.txt")
    swap_for_link_to_secret(tree.data / "inside", tree.secret)
    with pytest.raises(_safe_open.PathEscapeError):
        _safe_open.read_beneath(str(tree.data), "inside/f.txt", display=str(checked), use_openat2=use_openat2)


def test_write_after_a_swap_is_refused(tree: RunTree, use_openat2: bool) -> None:
    checked = tree.sandbox().validate_path("out/inside/new.txt", writable=True)
    swap_for_link_to_secret(tree.out / "inside", tree.secret)
    with pytest.raises(_safe_open.PathEscapeError):
        _safe_open.replace_beneath(str(tree.out), "inside/new.txt", b"x", display=str(checked))
    assert secret_files(tree) == ["f.txt", "key.txt"]
    assert leftovers(tree.base) == []


def test_missing_parents_are_not_made_through_a_swapped_link(tree: RunTree, use_openat2: bool) -> None:
    tree.sandbox().validate_path("out/inside/a/b/new.txt", writable=True)
    swap_for_link_to_secret(tree.out / "inside", tree.secret)
    with pytest.raises(_safe_open.PathEscapeError):
        _safe_open.replace_beneath(str(tree.out), "inside/a/b/new.txt", b"x", display="new.txt")
    assert secret_files(tree) == ["f.txt", "key.txt"]


def test_a_link_that_stays_inside_is_followed(tree: RunTree, use_openat2: bool) -> None:
    (tree.data / "inside").rename(tree.data / "real")
    (tree.data / "inside").symlink_to("real")
    data = _safe_open.read_beneath(str(tree.data), "inside/f.txt", display="f.txt", use_openat2=use_openat2)
    assert data == b"inside\n"
    written = _safe_open.replace_beneath(str(tree.data), "inside/g.txt", b"abc", display="g.txt")
    assert written == 3
    assert (tree.data / "real" / "g.txt").read_bytes() == b"abc"


def test_an_allowed_directory_replaced_by_a_link_is_refused(tree: RunTree, use_openat2: bool) -> None:
    # out/ itself was resolved when the sandbox was built; a link put in its place later is refused.
    checked = tree.sandbox().validate_path("out/x.txt", writable=True)
    swap_for_link_to_secret(tree.out, tree.secret)
    with pytest.raises(_safe_open.PathEscapeError, match="no longer a directory"):
        _safe_open.replace_beneath(str(tree.out), "x.txt", b"x", display=str(checked))
    with pytest.raises(_safe_open.PathEscapeError, match="no longer a directory"):
        _safe_open.read_beneath(str(tree.out), "key.txt", display="key.txt")
    assert secret_files(tree) == ["f.txt", "key.txt"]


# ------------------------------------------------------------------------------- under a flipping link

FLIPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    RENAME_EXCHANGE, AT_FDCWD = 2, -100
    pairs = [(a.encode(), b.encode()) for a, b in zip(sys.argv[2::2], sys.argv[3::2])]
    links = [p for p in sys.argv[1].split(",") if p]
    deadline = time.monotonic() + 30
    flips = 0
    while time.monotonic() < deadline and not os.path.exists(sys.argv[2] + ".stop"):
        for a, b in pairs:
            libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
        for link in links:
            target = "../secret" if flips % 2 else "inside"
            os.symlink(target, link + ".new")
            os.rename(link + ".new", link)
        flips += 1
        if flips == 2:
            open(sys.argv[2] + ".flipping", "w").close()
    """
)


@pytest.fixture
def flipping(tree: RunTree) -> Iterator[RunTree]:
    """Swap data/inside and out/inside with links to secret/, and flip data/link and out/link."""
    if not hasattr(ctypes.CDLL(None), "renameat2"):
        pytest.skip("libc has no renameat2 (glibc 2.28)")
    pairs = []
    for root in (tree.data, tree.out):
        (root / "swap").symlink_to("../secret")
        (root / "link").symlink_to("inside")
        pairs += [str(root / "inside"), str(root / "swap")]
    links = ",".join(str(root / "link") for root in (tree.data, tree.out))
    process = subprocess.Popen([sys.executable, "-c", FLIPPER, links, *pairs])
    try:
        started = Path(pairs[0] + ".flipping")
        deadline = time.monotonic() + 30  # a loaded machine may take long to start Python
        while not started.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.01)
        assert started.exists(), "the flipper never started flipping"
        yield tree
    finally:
        Path(pairs[0] + ".stop").touch()
        process.kill()
        process.wait(timeout=10)


OPERATIONS = 1500  # per kind; the flipper swaps tens of thousands of times meanwhile
RACE_SECONDS = 8  # an upper bound: on a loaded machine the loop ends early, never the test


async def test_no_write_or_read_escapes_under_a_flipping_link(flipping: RunTree, use_openat2: bool) -> None:
    tree = flipping
    tools = registry(tree.sandbox())
    outcomes = {"written": 0, "read": 0, "refused": 0}
    errors: list[str] = []
    deadline = time.monotonic() + RACE_SECONDS
    for index in range(OPERATIONS):
        if time.monotonic() > deadline:
            break
        for call, args in (
            ("file_write", {"path": f"out/{'link' if index % 2 else 'inside'}/w{index}.txt", "content": "w"}),
            ("file_read", {"path": f"data/{'link' if index % 2 else 'inside'}/f.txt"}),
        ):
            try:
                result = await invoke_tool(tools, call, args)
            except SandboxViolationError:
                outcomes["refused"] += 1
                continue
            except Exception as exc:  # an error, but never content from secret/
                errors.append(str(exc))
                continue
            if call == "file_read":
                assert result == "inside\n", f"read {result!r} through a swapped link"
                outcomes["read"] += 1
            else:
                outcomes["written"] += 1
    assert secret_files(tree) == ["f.txt", "key.txt"], outcomes
    assert leftovers(tree.base) == []
    assert not [e for e in errors if "SECRET" in e]
    assert outcomes["written"] > 0, outcomes
    assert outcomes["read"] > 0, outcomes
    assert outcomes["refused"] > 0, outcomes  # the flipper really raced the calls


# -------------------------------------------------------------------------------- what a write does


async def test_written_counts_the_bytes_on_disk(tree: RunTree) -> None:
    tools = registry(tree.sandbox(max_write_bytes=14))
    for content, encoding in (
        ("ñandú", "utf-8"),
        ("ab", "utf-16"),
        ("ñandú", "latin-1"),
        ("a\r\nb", "utf-8"),
    ):
        result = await invoke_tool(
            tools, "file_write", {"path": "out/x.txt", "content": content, "encoding": encoding}
        )
        assert result["written"] == os.path.getsize(tree.out / "x.txt") == len(content.encode(encoding))
    with pytest.raises(SandboxViolationError, match=r"writing 15 bytes exceeds max_write_bytes \(14\)"):
        await invoke_tool(tools, "file_write", {"path": "out/big.txt", "content": "x" * 15})
    assert not (tree.out / "big.txt").exists()


async def test_a_write_replaces_the_file_and_never_writes_through_a_hard_link(tree: RunTree) -> None:
    # A hard link in out/ to a readable-only file: the write replaces the link, data/ is untouched.
    os.link(tree.data / "notes.txt", tree.out / "hard.txt")
    (tree.out / "old.txt").chmod(0o640)
    tools = registry(tree.sandbox())
    await invoke_tool(tools, "file_write", {"path": "out/hard.txt", "content": "overwritten"})
    await invoke_tool(tools, "file_write", {"path": "out/old.txt", "content": "new"})
    assert (tree.data / "notes.txt").read_text(encoding="utf-8") == "hello notes\n"
    assert (tree.out / "hard.txt").read_text(encoding="utf-8") == "overwritten"
    assert stat.S_IMODE((tree.out / "old.txt").stat().st_mode) == 0o640  # the old permissions stay
    assert leftovers(tree.base) == []


async def test_reading_a_fifo_fails_at_once(tree: RunTree) -> None:
    os.mkfifo(tree.data / "pipe")
    # Opening it would block until a writer came: the refusal is what ends the call.
    with pytest.raises(Exception, match="is not a regular file"):
        await invoke_tool(registry(tree.sandbox()), "file_read", {"path": "data/pipe"})


async def test_the_pages_messages_are_kept(tree: RunTree) -> None:
    (tree.data / "link_out").symlink_to(tree.secret / "key.txt")
    tools = registry(tree.sandbox())
    with pytest.raises(
        SandboxViolationError, match=r"path 'data/link_out' \(resolved: .*\) is outside the readable"
    ):
        await invoke_tool(tools, "file_read", {"path": "data/link_out"})
    with pytest.raises(Exception, match=r"No such file or directory: '.*/data/missing.txt'"):
        await invoke_tool(tools, "file_read", {"path": "data/missing.txt"})
    with pytest.raises(Exception, match="Is a directory"):
        await invoke_tool(tools, "file_read", {"path": "data"})


async def test_with_the_sandbox_disabled_nothing_changes(tree: RunTree) -> None:
    # No checks: a link still leads anywhere, and a write goes through a hard link, in place.
    (tree.out / "to_secret").symlink_to(tree.secret)
    os.link(tree.data / "notes.txt", tree.out / "hard.txt")
    tools = registry(tree.sandbox(enabled=False))
    await invoke_tool(tools, "file_write", {"path": "out/to_secret/planted.txt", "content": "x"})
    await invoke_tool(tools, "file_write", {"path": "out/hard.txt", "content": "in place"})
    assert (tree.secret / "planted.txt").exists()
    assert (tree.data / "notes.txt").read_text(encoding="utf-8") == "in place"
    assert await invoke_tool(tools, "file_read", {"path": "out/to_secret/key.txt"}) == "SECRET-CONTENT\n"
