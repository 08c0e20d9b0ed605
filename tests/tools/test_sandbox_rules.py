"""Table-driven checks of every sandbox rule on the seed page, allowed and refused, grouped by rule."""

from __future__ import annotations

import inspect
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tools_support import FakeResolver, Tree

from airflow_provider_agentloom.exceptions import SandboxViolationError as ErrorFromExceptions
from airflow_provider_agentloom.tools.sandbox import SandboxViolationError, ToolSandbox
from airflow_provider_agentloom.workflow.models import SandboxConfig

ALLOWED = None


def check(call: Callable[[], object], expected: str | None, tool: str) -> Any:
    """Run ``call``: ``expected`` None means allowed; else a refusal whose reason contains it."""
    if expected is None:
        return call()
    with pytest.raises(SandboxViolationError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"Sandbox violation ({tool}): "), message
    assert expected in message, message
    return None


@pytest.fixture
def places(tree: Tree) -> dict[str, str]:
    """Placeholders the tables use for run-time paths."""
    fake = tree.data / "echo"
    fake.write_text("#!/bin/sh\necho fake\n", encoding="utf-8")
    fake.chmod(0o755)
    real_echo = shutil.which("echo")
    assert real_echo is not None
    (tree.data / "bin").mkdir()
    (tree.data / "bin" / "echo").symlink_to(real_echo)
    return {
        "base": str(tree.base),
        "data": str(tree.data),
        "secret": str(tree.secret),
        "which_echo": real_echo,
    }


# ======================================================================================= API shape


def test_constructor_takes_exactly_the_sandbox_config_fields() -> None:
    # base_dir, resolver and kernel_sandbox are ours, beside the page's fields.
    extras = ("base_dir", "resolver", "kernel_sandbox")
    params = [p for p in inspect.signature(ToolSandbox).parameters if p not in extras]
    assert params == list(SandboxConfig.model_fields)
    sandbox = ToolSandbox(**SandboxConfig(enabled=True, allowed_commands=["ls"]).model_dump())
    assert sandbox.enabled
    assert sandbox.base_dir == os.getcwd()


def test_sandbox_violation_error_is_re_exported() -> None:
    assert SandboxViolationError is ErrorFromExceptions


def test_path_lists_are_resolved_against_base_dir_when_built(tree: Tree) -> None:
    sandbox = tree.sandbox(readable_paths=["outside_link"])
    assert str(tree.data) in sandbox.readable_dirs  # the link resolved when the sandbox was built


def test_a_misspelled_field_is_refused() -> None:
    with pytest.raises(TypeError):
        ToolSandbox(allowed_command=["ls"])  # type: ignore[call-arg]


# ================================================================================ Commands, rule 1
# "The directory. cwd must sit under allowed_paths or readable_paths. Otherwise every command is
# refused: with cwd left at ., the directory you run from must be covered."
DIRECTORY_CASES = [
    pytest.param("echo hi", ".", {}, "working directory", id="dot-not-covered"),
    pytest.param("echo hi", "data", {}, ALLOWED, id="readable-dir"),
    pytest.param("echo hi", "shared", {}, ALLOWED, id="allowed-dir"),
    pytest.param("echo hi", "out", {}, "working directory", id="writable-only-dir"),
    pytest.param("echo hi", "secret", {}, "working directory", id="unlisted-dir"),
    pytest.param("echo hi", "data/../secret", {}, "working directory", id="dotdot-escape"),
    pytest.param("echo hi", "data/link_dir_out", {}, "working directory", id="symlink-escape"),
    pytest.param("echo hi", "outside_link", {}, ALLOWED, id="symlink-into-readable"),
    pytest.param("echo hi", "escape", {}, "working directory", id="symlink-to-parent"),
    pytest.param("echo hi", "{data}", {}, ALLOWED, id="absolute-readable"),
    pytest.param("echo hi", "/", {}, "working directory", id="root"),
    pytest.param("echo hi", "/tmp", {}, "working directory", id="tmp"),
    pytest.param("echo hi", ".", {"readable_paths": ["."]}, ALLOWED, id="dot-readable"),
    pytest.param("echo hi", ".", {"allowed_paths": ["."]}, ALLOWED, id="dot-allowed"),
    pytest.param(
        "echo hi",
        ".",
        {"allowed_paths": [], "readable_paths": [], "writable_paths": ["."]},
        "working directory",
        id="dot-writable-only",
    ),
    pytest.param(
        "echo hi",
        ".",
        {"allowed_paths": [], "readable_paths": [], "writable_paths": []},
        "working directory",
        id="no-path-lists",
    ),
    pytest.param("echo a | cat", "secret", {}, "working directory", id="directory-before-operators"),
    pytest.param("echo $HOME", "secret", {}, "working directory", id="directory-before-expansion"),
    pytest.param("curl x", "secret", {}, "working directory", id="directory-before-program"),
    pytest.param("bash -c ls", "secret", {}, "working directory", id="directory-before-interpreters"),
    pytest.param("cat /etc/passwd", "secret", {}, "working directory", id="directory-before-paths"),
    pytest.param("echo hi", "data/sub", {}, ALLOWED, id="missing-subdir-still-under"),
]


@pytest.mark.parametrize(("command", "cwd", "fields", "expected"), DIRECTORY_CASES)
def test_rule_1_directory(
    tree: Tree, places: dict[str, str], command: str, cwd: str, fields: dict[str, Any], expected: str | None
) -> None:
    sandbox = tree.sandbox(**fields)
    check(lambda: sandbox.validate_command(command, cwd=cwd.format(**places)), expected, "shell_command")


# ================================================================================ Commands, rule 2
# "Shell operators. |, ;, &, a backtick, <, >, $(, <(, >( and line breaks are refused anywhere in the
# command, even inside quotes. One call runs one program."
OPERATOR_CASES = [
    pytest.param("echo a | cat", "'|'", id="pipe"),
    pytest.param("echo hi|cat", "'|'", id="pipe-no-space"),
    pytest.param("echo a; ls", "';'", id="semicolon"),
    pytest.param("echo a & ls", "'&'", id="background"),
    pytest.param("echo a && ls", "'&'", id="and"),
    pytest.param("echo a || ls", "'|'", id="or"),
    pytest.param("echo `id`", "a backtick", id="backtick"),
    pytest.param("echo $(id)", "'$('", id="command-substitution"),
    pytest.param("cat <(ls)", "'<('", id="process-substitution-in"),
    pytest.param("echo >(ls)", "'>('", id="process-substitution-out"),
    pytest.param("cat < notes.txt", "'<'", id="redirect-in"),
    pytest.param("echo a > x", "'>'", id="redirect-out"),
    pytest.param("echo a >> x", "'>'", id="append"),
    pytest.param("echo a 2>&1", "'&'", id="fd-dup"),
    pytest.param("echo a\nls", "a line break", id="newline"),
    pytest.param("echo a\rls", "a line break", id="carriage-return"),
    pytest.param("echo 'a;b'", "';'", id="semicolon-single-quoted"),
    pytest.param('echo "a|b"', "'|'", id="pipe-double-quoted"),
    pytest.param("echo 'a&b'", "'&'", id="ampersand-quoted"),
    pytest.param('echo "x>y"', "'>'", id="greater-quoted"),
    pytest.param("echo 'x<y'", "'<'", id="less-quoted"),
    pytest.param("echo '`'", "a backtick", id="backtick-quoted"),
    pytest.param("echo a\\;b", "';'", id="semicolon-escaped"),
    pytest.param("echo plain words", ALLOWED, id="no-operator"),
]


@pytest.mark.parametrize(("command", "expected"), OPERATOR_CASES)
def test_rule_2_shell_operators(tree: Tree, command: str, expected: str | None) -> None:
    sandbox = tree.sandbox()
    reason = None if expected is None else f"shell operator {expected}"
    check(lambda: sandbox.validate_command(command, cwd="data"), reason, "shell_command")


# ================================================================================ Commands, rule 3
# "Shell expansion. $, *, ?, [, brace lists such as {a,b} or {1..3}, and a ~ that starts a word or
# follows = or : are refused anywhere in the command, even inside quotes."
EXPANSION_CASES = [
    pytest.param("echo $HOME", "'$'", id="variable"),
    pytest.param("echo '$5'", "'$'", id="dollar-single-quoted"),
    pytest.param('echo "${HOME}"', "'$'", id="braced-variable-quoted"),
    pytest.param("echo \\$x", "'$'", id="dollar-escaped"),
    pytest.param("echo $", "'$'", id="lone-dollar"),
    pytest.param("ls *.txt", "'*'", id="star"),
    pytest.param('ls "*.log"', "'*'", id="star-quoted"),
    pytest.param("ls notes.tx?", "'?'", id="question"),
    pytest.param("ls [ab].txt", "'['", id="bracket"),
    pytest.param("echo {a,b}", "brace list", id="brace-comma"),
    pytest.param("echo {1..3}", "brace list", id="brace-sequence"),
    pytest.param("echo x{,}", "brace list", id="brace-empty-items"),
    pytest.param('echo "{a,b}"', "brace list", id="brace-quoted"),
    pytest.param("echo pre{x,y}post", "brace list", id="brace-inside-word"),
    pytest.param("ls ~", "'~'", id="tilde-alone"),
    pytest.param("ls ~/x", "'~'", id="tilde-home-path"),
    pytest.param("ls ~root", "'~'", id="tilde-user"),
    pytest.param("echo --dir=~/x", "'~'", id="tilde-after-equals"),
    pytest.param("echo a:~/b", "'~'", id="tilde-after-colon"),
    pytest.param("echo '~'", "'~'", id="tilde-quoted"),
    pytest.param("echo a~b", ALLOWED, id="tilde-mid-word"),
    pytest.param("echo {a}", ALLOWED, id="brace-single-item"),
    pytest.param("echo a,b 1..3", ALLOWED, id="comma-and-dots-without-braces"),
    pytest.param("echo }{", ALLOWED, id="reversed-braces"),
    pytest.param("echo ] % ^", ALLOWED, id="other-punctuation"),
    pytest.param('echo "a b"', ALLOWED, id="plain-quotes"),
]


@pytest.mark.parametrize(("command", "expected"), EXPANSION_CASES)
def test_rule_3_shell_expansion(tree: Tree, command: str, expected: str | None) -> None:
    sandbox = tree.sandbox()
    reason = None if expected is None else f"shell expansion {expected}"
    check(lambda: sandbox.validate_command(command, cwd="data"), reason, "shell_command")


# ================================================================================ Commands, rule 4
# "The program. The file name of the first word must be in allowed_commands, matching case. A path,
# such as /usr/bin/grep or ./grep, must be the file that name resolves to on PATH."
PROGRAM_CASES = [
    pytest.param("echo hi", {}, ALLOWED, id="listed"),
    pytest.param("Echo hi", {}, "command 'Echo' is not in allowed_commands", id="case-differs"),
    pytest.param("ECHO hi", {}, "command 'ECHO' is not in allowed_commands", id="upper-case"),
    pytest.param("curl https://example.com", {}, "command 'curl' is not in allowed_commands", id="unlisted"),
    pytest.param("rm notes.txt", {}, "command 'rm' is not in allowed_commands", id="rm"),
    pytest.param("{which_echo} hi", {}, ALLOWED, id="path-on-PATH"),
    pytest.param("bin/echo hi", {}, ALLOWED, id="link-to-the-PATH-file"),
    pytest.param("./echo hi", {}, "is not the 'echo' found on PATH", id="dot-slash-other-file"),
    pytest.param("{data}/echo hi", {}, "is not the 'echo' found on PATH", id="absolute-other-file"),
    pytest.param("/tmp/evil/echo hi", {}, "is not the 'echo' found on PATH", id="missing-other-file"),
    pytest.param("/usr/bin/curl x", {}, "command 'curl' is not in allowed_commands", id="path-unlisted"),
    pytest.param("'echo' hi", {}, ALLOWED, id="quoted-program"),
    pytest.param('e"ch"o hi', {}, ALLOWED, id="split-quoted-program"),
    pytest.param("FOO=1 echo hi", {}, "command 'FOO=1' is not in allowed_commands", id="env-assignment"),
    pytest.param("PATH=/x/echo echo", {}, "is not the 'echo' found on PATH", id="assignment-with-path"),
    pytest.param("", {}, "the command is empty", id="empty"),
    pytest.param("   ", {}, "the command is empty", id="blank"),
    pytest.param("echo 'unterminated", {}, "cannot be parsed", id="unbalanced-quote"),
    pytest.param("nosuchprog x", {"allowed_commands": ["nosuchprog"]}, ALLOWED, id="listed-not-installed"),
    pytest.param(
        "/usr/bin/nosuchprog", {"allowed_commands": ["nosuchprog"]}, "none found", id="path-not-installed"
    ),
    pytest.param(
        "ls -la", {"allowed_commands": ["/usr/bin/ls"]}, "not in allowed_commands", id="list-by-path"
    ),
]


@pytest.mark.parametrize(("command", "fields", "expected"), PROGRAM_CASES)
def test_rule_4_program(
    tree: Tree, places: dict[str, str], command: str, fields: dict[str, Any], expected: str | None
) -> None:
    sandbox = tree.sandbox(**fields)
    text = command.format(**places)
    check(lambda: sandbox.validate_command(text, cwd="data"), expected, "shell_command")


# ================================================================================ Commands, rule 5
# "Interpreters and launchers. sh, bash, zsh, fish, ksh, dash, env, xargs, find, exec, eval, source,
# ., python, python3, node, perl, ruby, php, lua, awk, nc, ncat, socat and ssh ... are refused even
# when allowed, unless danger_opt_in lists them too, one by one."
INTERPRETERS = [
    "sh", "bash", "zsh", "fish", "ksh", "dash", "env", "xargs", "find", "exec", "eval", "source", ".",
    "python", "python3", "node", "perl", "ruby", "php", "lua", "awk", "nc", "ncat", "socat", "ssh",
]  # fmt: skip


@pytest.mark.parametrize("name", INTERPRETERS)
def test_rule_5_interpreter_refused_even_when_allowed(tree: Tree, name: str) -> None:
    sandbox = tree.sandbox(allowed_commands=[name])
    check(
        lambda: sandbox.validate_command(f"{name} x", cwd="data"), "interpreter or launcher", "shell_command"
    )


OPT_IN_CASES = [
    pytest.param("bash --version", ["bash"], ["bash"], ALLOWED, id="bash-opted-in"),
    pytest.param("awk x", ["awk"], ["awk"], ALLOWED, id="awk-opted-in"),
    pytest.param("find x", ["find"], ["find"], ALLOWED, id="find-opted-in"),
    pytest.param("python3 -V", ["python3"], ["python"], "danger_opt_in", id="one-by-one-python3"),
    pytest.param("env x", ["env", "sh"], ["sh"], "danger_opt_in", id="other-name-opted-in"),
    pytest.param("bash x", ["echo"], ["bash"], "not in allowed_commands", id="opt-in-without-allowed"),
    pytest.param("BASH x", ["BASH"], [], "interpreter or launcher", id="case-variant"),
    pytest.param("sh x", ["sh", "bash"], ["bash"], "danger_opt_in", id="sh-needs-its-own"),
]


@pytest.mark.parametrize(("command", "allowed", "opt_in", "expected"), OPT_IN_CASES)
def test_rule_5_danger_opt_in(
    tree: Tree, command: str, allowed: list[str], opt_in: list[str], expected: str | None
) -> None:
    sandbox = tree.sandbox(allowed_commands=allowed, danger_opt_in=opt_in)
    check(lambda: sandbox.validate_command(command, cwd="data"), expected, "shell_command")


# ================================================================================ Commands, rule 6
# "Path arguments. ... each argument that looks like a path, such as ., .., anything with a /, or the
# value of --opt=dir/file, must resolve, from cwd, under one of the three lists. A bare name that is a
# symbolic link is checked too. A path attached to a short flag is checked from its first /."
PATH_ARG_CASES = [
    pytest.param("cat notes.txt", ALLOWED, id="bare-name"),
    pytest.param("cat ./notes.txt", ALLOWED, id="dot-slash"),
    pytest.param("cat ../secret/key.txt", "'../secret/key.txt'", id="dotdot-outside"),
    pytest.param("cat {secret}/key.txt", "'{secret}/key.txt'", id="absolute-outside"),
    pytest.param("cat /etc/passwd", "'/etc/passwd'", id="etc-passwd"),
    pytest.param("ls .", ALLOWED, id="dot"),
    pytest.param("ls ..", "'..'", id="dotdot-base-not-listed"),
    pytest.param("ls ../out", ALLOWED, id="writable-dir-counts"),
    pytest.param("cat ../out/old.txt", ALLOWED, id="read-under-writable-passes"),
    pytest.param("ls ../shared", ALLOWED, id="allowed-dir"),
    pytest.param("cp notes.txt ../out/x.txt", ALLOWED, id="copy-into-writable"),
    pytest.param("cp ../secret/key.txt ../out/x.txt", "'../secret/key.txt'", id="copy-from-secret"),
    pytest.param("cat link_out", "'link_out'", id="bare-symlink-outside"),
    pytest.param("cat link_in", ALLOWED, id="bare-symlink-inside"),
    pytest.param("ls link_dir_out", "'link_dir_out'", id="bare-dir-symlink-outside"),
    pytest.param("cat link_dir_out/key.txt", "'link_dir_out/key.txt'", id="through-dir-symlink"),
    pytest.param("grep --file=../secret/key.txt x", "'../secret/key.txt'", id="long-opt-value-outside"),
    pytest.param("grep --file=notes.txt x", ALLOWED, id="long-opt-bare-value"),
    pytest.param("grep --file=link_out x", "'link_out'", id="long-opt-symlink-value"),
    pytest.param("grep --file=./notes.txt x", ALLOWED, id="long-opt-value-inside"),
    pytest.param("grep -o=/etc/passwd x", "'/etc/passwd'", id="short-opt-equals"),
    pytest.param("echo --x=/etc", "'/etc'", id="long-opt-absolute"),
    pytest.param("grep -finclude/list x", "'/list'", id="glued-short-flag-page-example"),
    pytest.param("grep -f include/list x", ALLOWED, id="separate-short-flag-page-example"),
    pytest.param("grep -f../secret/key.txt x", "'/secret/key.txt'", id="glued-from-first-slash"),
    pytest.param("grep -r/etc x", "'/etc'", id="glued-absolute"),
    pytest.param("grep -f /etc/passwd x", "'/etc/passwd'", id="separate-absolute"),
    pytest.param("grep -e foo/bar notes.txt", ALLOWED, id="pattern-with-slash-inside"),
    pytest.param("cat if=/etc/passwd", "'/etc/passwd'", id="key-value-absolute"),
    pytest.param("cat key=../out/a", ALLOWED, id="key-value-inside"),
    pytest.param("echo a=b/c", ALLOWED, id="key-value-both-readings-inside"),
    pytest.param("echo https://example.com", ALLOWED, id="url-is-a-relative-path"),
    pytest.param("cat file:///etc/passwd", ALLOWED, id="file-url-passes-page-caution"),
    pytest.param("ls ../../..", "'../../..'", id="deep-dotdot"),
    pytest.param("cat {data}/notes.txt", ALLOWED, id="absolute-inside"),
    pytest.param("cat {data}/../secret/key.txt", "'{data}/../secret/key.txt'", id="absolute-dotdot-outside"),
    pytest.param("ls /", "'/'", id="root"),
    pytest.param("ls -la", ALLOWED, id="flag-without-slash"),
    pytest.param("ls --color=auto", ALLOWED, id="long-flag-without-slash"),
    pytest.param("cat -- -notes", ALLOWED, id="dash-name"),
    pytest.param("echo ../out/../../secret", "'../out/../../secret'", id="dotdot-zigzag"),
    pytest.param("wc ../escape/run/data/notes.txt", ALLOWED, id="symlink-path-landing-inside"),
    pytest.param("cat ../escape", "'../escape'", id="symlink-path-landing-outside"),
    pytest.param("cat ../outside_link/notes.txt", ALLOWED, id="base-link-into-data"),
    pytest.param("cat ../data2/x", "'../data2/x'", id="sibling-with-common-prefix"),
]


@pytest.mark.parametrize(("command", "expected"), PATH_ARG_CASES)
def test_rule_6_path_arguments(
    tree: Tree, places: dict[str, str], command: str, expected: str | None
) -> None:
    sandbox = tree.sandbox()
    text = command.format(**places)
    reason = None if expected is None else f"path argument {expected.format(**places)}"
    check(lambda: sandbox.validate_command(text, cwd="data"), reason, "shell_command")


def test_commands_unchecked_when_disabled(tree: Tree) -> None:
    sandbox = tree.sandbox(enabled=False)
    sandbox.validate_command("bash -c 'rm -rf / | cat $HOME'", cwd="/")


def test_command_must_be_a_string(tree: Tree) -> None:
    sandbox = tree.sandbox()
    check(lambda: sandbox.validate_command(["ls"], cwd="data"), "must be a string", "shell_command")  # type: ignore[arg-type]


def test_command_with_nul_is_refused(tree: Tree) -> None:
    sandbox = tree.sandbox()
    check(lambda: sandbox.validate_command("echo a\x00b", cwd="data"), "NUL", "shell_command")


# ========================================================================================= Files
# "file_read may read under allowed_paths and readable_paths; file_write may write under allowed_paths
# and writable_paths. A directory listed only in writable_paths can't be read. Paths are resolved
# before the check, .. and symbolic links included. With the sandbox enabled and no path lists,
# nothing can be read or written."
FILE_CASES = [
    pytest.param("data/notes.txt", False, {}, ALLOWED, id="read-readable"),
    pytest.param("shared/a.txt", False, {}, ALLOWED, id="read-allowed"),
    pytest.param("shared/new.txt", True, {}, ALLOWED, id="write-allowed"),
    pytest.param("out/new.txt", True, {}, ALLOWED, id="write-writable"),
    pytest.param("out/sub/deep/x.txt", True, {}, ALLOWED, id="write-deep-new-dirs"),
    pytest.param("out/old.txt", False, {}, "only writable", id="read-write-only-dir"),
    pytest.param("data/new.txt", True, {}, "outside the writable directories", id="write-read-only-dir"),
    pytest.param("secret/key.txt", False, {}, "outside the readable directories", id="read-unlisted"),
    pytest.param("secret/key.txt", True, {}, "outside the writable directories", id="write-unlisted"),
    pytest.param("data/link_out", False, {}, "resolved:", id="read-symlink-outside"),
    pytest.param("data/link_in", False, {}, ALLOWED, id="read-symlink-inside"),
    pytest.param("data/../secret/key.txt", False, {}, "outside the readable", id="read-dotdot"),
    pytest.param("data/link_dir_out/key.txt", False, {}, "outside the readable", id="read-dir-symlink"),
    pytest.param("data/link_dir_out/x", True, {}, "outside the writable", id="write-dir-symlink"),
    pytest.param("out/../data/x", True, {}, "outside the writable", id="write-dotdot"),
    pytest.param("/etc/hostname", False, {}, "'/etc/hostname'", id="read-etc"),
    pytest.param("/etc/x", True, {}, "outside the writable", id="write-etc"),
    pytest.param("data", False, {}, ALLOWED, id="read-the-directory-itself"),
    pytest.param("", False, {}, "outside the readable", id="empty-is-base"),
    pytest.param(".", False, {}, "outside the readable", id="dot-is-base"),
    pytest.param("outside_link/notes.txt", False, {}, ALLOWED, id="base-link-into-data"),
    pytest.param("escape/run/data/notes.txt", False, {}, ALLOWED, id="long-way-round-inside"),
    pytest.param("data2/x", False, {}, "outside the readable", id="sibling-prefix"),
    pytest.param("{data}/notes.txt", False, {}, ALLOWED, id="absolute-inside"),
    pytest.param("{secret}/key.txt", False, {}, "outside the readable", id="absolute-outside"),
    pytest.param("a\x00b", False, {}, "NUL", id="nul"),
    pytest.param(123, False, {}, "must be a string", id="not-a-string"),
    pytest.param(
        "data/notes.txt",
        False,
        {"allowed_paths": [], "readable_paths": [], "writable_paths": []},
        "no file access",
        id="no-lists-no-read",
    ),
    pytest.param(
        "out/x",
        True,
        {"allowed_paths": [], "readable_paths": [], "writable_paths": []},
        "no file access",
        id="no-lists-no-write",
    ),
    pytest.param("secret/key.txt", False, {"enabled": False}, ALLOWED, id="disabled-reads-anything"),
    pytest.param("/etc/x", True, {"enabled": False}, ALLOWED, id="disabled-writes-anything"),
]


@pytest.mark.parametrize(("path", "writable", "fields", "expected"), FILE_CASES)
def test_files(
    tree: Tree,
    places: dict[str, str],
    path: Any,
    writable: bool,
    fields: dict[str, Any],
    expected: str | None,
) -> None:
    sandbox = tree.sandbox(**fields)
    target = path.format(**places) if isinstance(path, str) else path
    tool = "file_write" if writable else "file_read"
    result = check(lambda: sandbox.validate_path(target, writable=writable, tool_name=tool), expected, tool)
    if expected is None:
        assert isinstance(result, Path)
        assert result.is_absolute()


def test_validate_path_returns_the_resolved_file(tree: Tree) -> None:
    assert tree.sandbox().validate_path("data/link_in") == tree.data / "notes.txt"
    assert tree.sandbox().validate_path(Path("data") / "notes.txt") == tree.data / "notes.txt"


# "max_write_bytes limits the encoded size of what file_write writes."
WRITE_SIZE_CASES = [
    pytest.param(10, {"max_write_bytes": 10}, ALLOWED, id="at-limit"),
    pytest.param(11, {"max_write_bytes": 10}, "exceeds max_write_bytes (10)", id="over-limit"),
    pytest.param(1, {"max_write_bytes": 0}, "exceeds", id="zero-limit"),
    pytest.param(0, {"max_write_bytes": 0}, ALLOWED, id="empty-at-zero"),
    pytest.param(10**9, {}, ALLOWED, id="no-limit"),
    pytest.param(11, {"max_write_bytes": 10, "enabled": False}, ALLOWED, id="disabled"),
]


@pytest.mark.parametrize(("size", "fields", "expected"), WRITE_SIZE_CASES)
def test_max_write_bytes(tree: Tree, size: int, fields: dict[str, Any], expected: str | None) -> None:
    sandbox = tree.sandbox(**fields)
    check(lambda: sandbox.validate_write_size(size), expected, "file_write")


# ======================================================================================= Network
# "allow_network: false, which refuses every request; allowed_schemes: the URL's scheme must be
# listed. Only http and https ever work; allowed_domains, when set: the host must be listed exactly,
# without regard to case."
SCHEME_AND_DOMAIN_CASES = [
    pytest.param("http://example.com/", {}, ALLOWED, id="http"),
    pytest.param("https://example.com/x?y=1", {}, ALLOWED, id="https"),
    pytest.param("HTTP://EXAMPLE.COM/", {}, ALLOWED, id="upper-case-url"),
    pytest.param("ftp://example.com/", {}, "scheme 'ftp' is not in allowed_schemes", id="ftp"),
    pytest.param("file:///etc/passwd", {}, "scheme 'file'", id="file"),
    pytest.param("gopher://example.com/", {}, "scheme 'gopher'", id="gopher"),
    pytest.param("http://example.com/", {"allowed_schemes": ["https"]}, "scheme 'http'", id="https-only"),
    pytest.param("https://example.com/", {"allowed_schemes": ["https"]}, ALLOWED, id="https-only-ok"),
    pytest.param("https://example.com/", {"allowed_schemes": ["HTTPS"]}, ALLOWED, id="scheme-any-case"),
    pytest.param("ftp://example.com/", {"allowed_schemes": ["ftp"]}, "only http and https", id="ftp-listed"),
    pytest.param("http://example.com/", {"allowed_schemes": []}, ALLOWED, id="empty-schemes-no-limit"),
    pytest.param("http://example.com/", {"allow_network": False}, "allow_network: false", id="no-network"),
    pytest.param("http://api.example.com/", {"allowed_domains": ["api.example.com"]}, ALLOWED, id="listed"),
    pytest.param(
        "http://API.Example.COM/", {"allowed_domains": ["api.example.com"]}, ALLOWED, id="listed-any-case"
    ),
    pytest.param(
        "http://api.example.com/", {"allowed_domains": ["API.EXAMPLE.COM"]}, ALLOWED, id="list-any-case"
    ),
    pytest.param(
        "http://api.example.com./", {"allowed_domains": ["api.example.com"]}, ALLOWED, id="trailing-dot"
    ),
    pytest.param(
        "http://eu.api.example.com/",
        {"allowed_domains": ["api.example.com"]},
        "not in allowed_domains",
        id="subdomain-not-admitted",
    ),
    pytest.param(
        "http://example.com/", {"allowed_domains": ["api.example.com"]}, "not in allowed_domains", id="parent"
    ),
    pytest.param(
        "http://api.example.com.evil.test/",
        {"allowed_domains": ["api.example.com"]},
        "not in allowed_domains",
        id="suffix-trick",
    ),
    pytest.param(
        "http://api.example.com@evil.test/",
        {"allowed_domains": ["api.example.com"]},
        "'evil.test' is not in allowed_domains",
        id="userinfo-trick",
    ),
    pytest.param(
        "http://api.example.com/",
        {"allowed_domains": ["*.example.com"]},
        "not in allowed_domains",
        id="wildcard-entry-matches-nothing",
    ),
    pytest.param("http://%20localhost/", {}, "invalid host", id="percent-encoded-space"),
    pytest.param("http://", {}, "has no host", id="no-host"),
    pytest.param("not a url", {}, "scheme ''", id="not-a-url"),
    pytest.param("http://exa mple.com/", {}, "invalid host", id="space-in-host"),
    pytest.param("http://[::1/", {}, "invalid URL", id="broken-ipv6"),
    pytest.param("http://example.com:99999/", {}, "invalid URL", id="port-out-of-range"),
    pytest.param(123, {}, "url must be a string", id="not-a-string"),
]


@pytest.mark.parametrize(("url", "fields", "expected"), SCHEME_AND_DOMAIN_CASES)
def test_network_schemes_and_domains(
    tree: Tree, resolver: FakeResolver, url: Any, fields: dict[str, Any], expected: str | None
) -> None:
    sandbox = tree.sandbox(resolver=resolver, **fields)
    check(lambda: sandbox.validate_network(url), expected, "http_request")


# "Without allowed_domains, internal addresses are refused: loopback, private and link-local ranges,
# the cloud metadata address 169.254.169.254, shared address space and localhost, in any spelling,
# such as 127.1, 0x7f000001 or [::ffff:127.0.0.1]."
INTERNAL_SPELLINGS = [
    "127.0.0.1", "127.1", "127.0.1", "0x7f000001", "0x7f.1", "2130706433", "0177.0.0.1", "017700000001",
    "127.0.0.1.", "127.255.255.254", "%31%32%37.0.0.1", "[::1]", "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "10.0.0.1", "10.255.255.255", "172.16.0.1",
    "172.31.255.255", "192.168.1.1", "169.254.169.254", "169.254.0.1", "100.64.0.1", "100.127.255.255",
    "0.0.0.0", "0", "[::]", "[fd00::1]", "[fc00::1]", "[fe80::1]", "[fe80::1%25eth0]", "[fec0::1]",
    "[64:ff9b::a00:1]", "[2002:a00:1::]", "[::ffff:169.254.169.254]", "224.0.0.1", "255.255.255.255",
    "192.0.2.1", "localhost", "LOCALHOST", "localhost.", "api.localhost", "%6c%6f%63%61%6c%68%6f%73%74",
]  # fmt: skip


@pytest.mark.parametrize("host", INTERNAL_SPELLINGS)
def test_network_internal_address_refused_in_any_spelling(
    tree: Tree, resolver: FakeResolver, host: str
) -> None:
    sandbox = tree.sandbox(resolver=resolver)
    check(lambda: sandbox.validate_network(f"http://{host}:8080/x"), "internal address", "http_request")
    assert resolver.calls == []  # refused from the spelling alone, before any lookup


PUBLIC_LITERALS = [
    pytest.param("93.184.216.34", "93.184.216.34", id="dotted"),
    pytest.param("8.8.8.8", "8.8.8.8", id="dns"),
    pytest.param("0x5db8d822", "93.184.216.34", id="hex-public"),
    pytest.param("1572395042", "93.184.216.34", id="decimal-public"),
    pytest.param("[2606:4700:4700::1111]", "2606:4700:4700::1111", id="ipv6-public"),
    pytest.param("100.128.0.1", "100.128.0.1", id="just-past-shared-space"),
    pytest.param("172.32.0.1", "172.32.0.1", id="just-past-172-16"),
]


@pytest.mark.parametrize(("host", "address"), PUBLIC_LITERALS)
def test_network_public_literal_is_pinned_without_lookup(
    tree: Tree, resolver: FakeResolver, host: str, address: str
) -> None:
    target = tree.sandbox(resolver=resolver).validate_network(f"https://{host}/")
    assert target.addresses == (address,)
    assert target.port == 443
    assert resolver.calls == []


# "A host name is resolved and every address it returns is checked, and a host that doesn't resolve
# is refused."
RESOLUTION_CASES = [
    pytest.param("example.com", ALLOWED, id="public"),
    pytest.param("dual.example.com", ALLOWED, id="two-public-addresses"),
    pytest.param("rebind.example.com", "internal address 127.0.0.1", id="resolves-to-loopback"),
    pytest.param("metadata.example.com", "internal address 169.254.169.254", id="metadata"),
    pytest.param("cgnat.example.com", "internal address 100.64.1.1", id="shared-space"),
    pytest.param("v6local.example.com", "internal address fd00::1", id="ula"),
    pytest.param("mapped.example.com", "internal address ::ffff:10.0.0.1", id="mapped"),
    pytest.param("mixed.example.com", "internal address 10.0.0.5", id="one-of-two-internal"),
    pytest.param("intranet.corp", "internal address 10.1.2.3", id="private"),
    pytest.param("nowhere.example", "does not resolve", id="nxdomain"),
    pytest.param("empty.example.com", "does not resolve", id="no-addresses"),
]


@pytest.mark.parametrize(("host", "expected"), RESOLUTION_CASES)
def test_network_every_resolved_address_is_checked(
    tree: Tree, resolver: FakeResolver, host: str, expected: str | None
) -> None:
    sandbox = tree.sandbox(resolver=resolver)
    target = check(lambda: sandbox.validate_network(f"http://{host}/"), expected, "http_request")
    assert [h for h, _ in resolver.calls] == [host]
    if expected is None:
        assert target.addresses == tuple(resolver.answers[host][0])
        assert target.pinned


# "A listed host is reached even when it is internal ... unless deny_internal_hosts is on."
LISTED_INTERNAL_CASES = [
    pytest.param("http://intranet.corp/", ["intranet.corp"], False, ALLOWED, id="listed-private-name"),
    pytest.param("http://intranet.corp/", ["intranet.corp"], True, "internal address", id="denied"),
    pytest.param("http://127.0.0.1:8080/", ["127.0.0.1"], False, ALLOWED, id="listed-loopback-literal"),
    pytest.param("http://127.0.0.1:8080/", ["127.0.0.1"], True, "internal address", id="denied-literal"),
    pytest.param("http://127.1:8080/", ["127.0.0.1"], False, "not in allowed_domains", id="other-spelling"),
    pytest.param("http://localhost/", ["localhost"], False, ALLOWED, id="listed-localhost"),
    pytest.param("http://localhost/", ["localhost"], True, "internal address", id="denied-localhost"),
    pytest.param("http://[::1]/", ["[::1]"], False, ALLOWED, id="listed-ipv6-loopback"),
    pytest.param("http://example.com/", ["example.com"], True, ALLOWED, id="deny-keeps-public"),
]


@pytest.mark.parametrize(("url", "domains", "deny", "expected"), LISTED_INTERNAL_CASES)
def test_network_listed_internal_hosts(
    tree: Tree, resolver: FakeResolver, url: str, domains: list[str], deny: bool, expected: str | None
) -> None:
    sandbox = tree.sandbox(resolver=resolver, allowed_domains=domains, deny_internal_hosts=deny)
    check(lambda: sandbox.validate_network(url), expected, "http_request")


def test_network_unchecked_when_disabled(tree: Tree, resolver: FakeResolver) -> None:
    # "allow_network: false without enabled: true limits attachment downloads and nothing else."
    sandbox = tree.sandbox(enabled=False, allow_network=False, resolver=resolver)
    target = sandbox.validate_network("http://127.0.0.1:9/")
    assert not target.pinned
    assert resolver.calls == []
    assert not sandbox.validate_network("not a url").pinned


# ====================================================================== Webhooks and attachments
# "Webhooks: No internal addresses, unless allowed. | Also allow_network, allowed_schemes and
# allowed_domains." (What it covers: enabled false | enabled true)
WEBHOOK_CASES = [
    pytest.param("http://localhost:8642/webhook", {"enabled": False}, "internal address", id="off-internal"),
    pytest.param(
        "http://localhost:8642/webhook",
        {"enabled": False, "allow_internal_webhook_targets": True},
        ALLOWED,
        id="off-internal-allowed",
    ),
    pytest.param("https://example.com/hook", {"enabled": False}, ALLOWED, id="off-public"),
    pytest.param("ftp://example.com/hook", {"enabled": False}, "scheme 'ftp'", id="off-ftp"),
    pytest.param(
        "https://example.com/hook", {"enabled": False, "allow_network": False}, ALLOWED, id="off-no-network"
    ),
    pytest.param(
        "https://example.com/hook",
        {"enabled": False, "allowed_domains": ["api.example.com"]},
        ALLOWED,
        id="off-domains-ignored",
    ),
    pytest.param("https://example.com/hook", {"allow_network": False}, "allow_network", id="on-no-network"),
    pytest.param(
        "https://example.com/hook", {"allowed_domains": ["api.example.com"]}, "allowed_domains", id="on-dom"
    ),
    pytest.param("http://example.com/hook", {"allowed_schemes": ["https"]}, "scheme 'http'", id="on-scheme"),
    pytest.param(
        "http://intranet.corp/hook",
        {"allowed_domains": ["intranet.corp"]},
        "internal address",
        id="on-listed-internal-still-refused",
    ),
    pytest.param(
        "http://intranet.corp/hook",
        {"allowed_domains": ["intranet.corp"], "allow_internal_webhook_targets": True},
        ALLOWED,
        id="on-listed-internal-allowed",
    ),
    pytest.param("http://169.254.169.254/", {}, "internal address", id="on-metadata"),
]


@pytest.mark.parametrize(("url", "fields", "expected"), WEBHOOK_CASES)
def test_webhook_url(
    tree: Tree, resolver: FakeResolver, url: str, fields: dict[str, Any], expected: str | None
) -> None:
    sandbox = tree.sandbox(resolver=resolver, **fields)
    target = check(lambda: sandbox.validate_webhook_url(url), expected, "webhook")
    if expected is None:
        assert target.pinned


# "Attachment downloads: allow_network, allowed_domains, no internal addresses. | The same."
ATTACHMENT_CASES = [
    pytest.param("http://example.com/x.png", {"enabled": False}, ALLOWED, id="off-public"),
    pytest.param("http://127.0.0.1/x.png", {"enabled": False}, "internal address", id="off-loopback"),
    pytest.param("http://example.com/x.png", {"enabled": False, "allow_network": False}, "allow_network",
                 id="off-no-network"),
    pytest.param("http://example.com/x.png", {"enabled": False, "allowed_domains": ["api.example.com"]},
                 "allowed_domains", id="off-unlisted"),
    pytest.param("http://intranet.corp/x.png", {"allowed_domains": ["intranet.corp"]}, "internal address",
                 id="on-listed-internal-refused"),
    pytest.param("http://api.example.com/x.png", {"allowed_domains": ["api.example.com"]}, ALLOWED,
                 id="on-listed"),
    pytest.param("file:///etc/passwd", {}, "scheme 'file'", id="file-scheme"),
    pytest.param("http://rebind.example.com/x.png", {"enabled": False}, "internal address", id="off-rebind"),
]  # fmt: skip


@pytest.mark.parametrize(("url", "fields", "expected"), ATTACHMENT_CASES)
def test_attachment_url(
    tree: Tree, resolver: FakeResolver, url: str, fields: dict[str, Any], expected: str | None
) -> None:
    sandbox = tree.sandbox(resolver=resolver, **fields)
    check(lambda: sandbox.validate_attachment_url(url), expected, "attachment")


# "Attachment files: Any path. | allowed_paths and readable_paths."
def test_attachment_files_use_the_read_rule(tree: Tree) -> None:
    sandbox = tree.sandbox()
    check(lambda: sandbox.validate_path("out/old.txt", tool_name="attachment"), "only writable", "attachment")
    assert sandbox.validate_path("data/notes.txt", tool_name="attachment") == tree.data / "notes.txt"
