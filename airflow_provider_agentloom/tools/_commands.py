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
