"""How the sandbox reads a command line: shell operators, shell expansion, words and path arguments."""

from __future__ import annotations

import re
import shlex

#: Interpreters and launchers that can run anything else (seed page, "Commands", rule 5).
INTERPRETERS_AND_LAUNCHERS = frozenset(
    {
        "sh",
        "bash",
        "zsh",
        "fish",
        "ksh",
        "dash",
        "env",
        "xargs",
        "find",
        "exec",
        "eval",
        "source",
        ".",
        "python",
        "python3",
        "node",
        "perl",
        "ruby",
        "php",
        "lua",
        "awk",
        "nc",
        "ncat",
        "socat",
        "ssh",
    }
)

#: Stricter than the page: more programs that run another program, or act as another user or
#: in another namespace (issue 7). They need ``danger_opt_in`` like the page's list.
MORE_LAUNCHERS = frozenset(
    {
        # run the program in their arguments
        "timeout", "nice", "nohup", "setsid", "stdbuf", "chrt", "taskset", "ionice", "flock", "time",
        "watch", "script", "command", "builtin", "parallel",
        # as another user, root or namespace
        "sudo", "su", "doas", "pkexec", "runuser", "setpriv", "capsh", "chroot", "unshare", "nsenter",
        # run or inspect any program
        "busybox", "strace", "ltrace", "gdb",
        # variants of the page's shells and interpreters
        "ash", "mksh", "csh", "tcsh", "rbash", "gawk", "mawk", "nawk", "pypy", "pypy3",
    }
)  # fmt: skip
_LAUNCHERS = INTERPRETERS_AND_LAUNCHERS | MORE_LAUNCHERS
# "python3.11", "perl5.36", "php8.2", "node20", "lua5.4": a listed name, then digits and dots.
_VERSIONED = re.compile(r"^(?P<base>[a-z]+?)[0-9][0-9.]*$")
# The dynamic loader runs any program it is given: "ld-linux-x86-64.so.2 /bin/sh".
_LOADER = re.compile(r"^ld(-linux[\w.-]*|\.so[\w.-]*|-musl[\w.-]*)$")


def launcher_name(name: str) -> str | None:
    """Return the listed interpreter or launcher that program ``name`` is (any case), or None.

    A versioned name (``python3.11``) is its interpreter; so is the dynamic loader.
    """
    lowered = name.lower()
    if lowered in _LAUNCHERS:
        return lowered
    versioned = _VERSIONED.match(lowered)
    if versioned is not None and versioned.group("base") in _LAUNCHERS:
        return versioned.group("base")
    return lowered if _LOADER.match(lowered) else None


# Rule 2: two-character operators first, so "$(" is named rather than "$".
_OPERATORS = ("$(", "<(", ">(", "|", ";", "&", "`", "<", ">", "\n", "\r")
_OPERATOR_NAMES = {"\n": "a line break", "\r": "a line break", "`": "a backtick"}
# Rule 3: "{a,b}", "{,}", "{1..3}" (a brace pair holding a comma or "..").
_BRACE_LIST = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")
# Rule 3: "~" starting a word (quotes included) or following "=" or ":".
_TILDE = re.compile(r"(?:^|(?<=[\s=:'\"]))~")
_EXPANSION_CHARACTERS = ("$", "*", "?", "[")


def find_operator(command: str) -> str | None:
    """Return a readable name of the first shell operator in ``command``, or None."""
    for operator in _OPERATORS:
        if operator in command:
            return _OPERATOR_NAMES.get(operator, repr(operator))
    return None


def find_expansion(command: str) -> str | None:
    """Return a readable name of the first shell expansion in ``command``, or None."""
    for character in _EXPANSION_CHARACTERS:
        if character in command:
            return repr(character)
    brace = _BRACE_LIST.search(command)
    if brace is not None:
        return f"brace list {brace.group(0)!r}"
    if _TILDE.search(command):
        return "'~' at the start of a word"
    return None


def split_words(command: str) -> list[str]:
    """Split ``command`` as ``sh`` would (no operators or expansions are left); raise ``ValueError``."""
    return shlex.split(command)


def path_candidates(word: str) -> list[str]:
    """Return the strings in an argument that ``sh``'s program may take as paths (rule 6).

    - ``.``, ``..`` and a word with a ``/`` are paths; a bare name is returned too, so the caller can
      check it when it is a symbolic link;
    - ``--opt=dir/file`` and ``-o=dir/file``: the value after ``=``;
    - a short flag with a path glued on, ``-finclude/list``: from its first ``/``, so ``/list``;
    - ``key=value`` that is not an option: both the whole word and the value.
    """
    if word.startswith("-") and len(word) > 1:
        equals, slash = word.find("="), word.find("/")
        if equals != -1 and (slash == -1 or equals < slash):
            value = word[equals + 1 :]
            return [value] if value else []
        return [word[slash:]] if slash != -1 else []
    candidates = [word]
    key, sign, value = word.partition("=")
    if sign and key and "/" not in key and value:
        candidates.append(value)
    return candidates
