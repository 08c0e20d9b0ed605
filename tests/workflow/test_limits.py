"""The limits module on its own: reading only regular files, measuring YAML with aliases expanded, options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.workflow.limits import (
    DEFAULT_LIMITS,
    Budget,
    ParseLimits,
    check_nodes,
    limits_from,
    read_workflow_text,
)
from airflow_provider_agentloom.workflow.parser import parse_workflow_text


def refusal(path: str | Path, limits: ParseLimits = DEFAULT_LIMITS) -> str:
    with pytest.raises(WorkflowValidationError) as caught:
        read_workflow_text(path, limits)
    return str(caught.value)


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    os.symlink("nowhere", tmp_path / "dangling")
    assert refusal(tmp_path / "pipe").endswith("it is a FIFO (named pipe), not a regular file")
    assert refusal("/dev/zero").endswith("it is a character device, not a regular file")
    assert refusal(tmp_path).endswith("it is a directory, not a regular file")
    assert refusal(tmp_path / "dangling").endswith(
        "broken symbolic link: its target 'nowhere' does not exist"
    )
    assert refusal(tmp_path / "absent").endswith("file not found")


def test_size_is_checked_before_and_while_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("x" * 101)
    small = ParseLimits(max_file_bytes=100)
    assert "file too large: 101 bytes, over the limit of 100" in refusal(big, small)
    # procfs reports a size of 0 and then returns more: the read itself stops past the limit
    assert "file too large: more than 100 bytes" in refusal("/proc/self/status", small)


def test_decode_errors_name_the_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: x\nsteps: []\ndescription: café\n".encode("latin-1"))
    assert (
        refusal(path)
        == f"{path}:3: not UTF-8 text: byte 0xe9 at line 3, column 17 cannot be decoded (a workflow file must be UTF-8 YAML)"
    )
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbfname: x\n")
    assert read_workflow_text(bom).lstrip("\ufeff") == "name: x\n"


def measure(text: str, limits: ParseLimits) -> int:
    budget = Budget.start(limits, "flow.yaml")
    depth = check_nodes(yaml.compose(text, Loader=yaml.SafeLoader), budget, "flow.yaml")
    return limits.max_nodes - budget.nodes_left, depth  # type: ignore[return-value]


def test_aliases_count_as_the_nodes_they_repeat() -> None:
    text = "a: &a [1, 2, 3]\nb: [*a, *a, *a]\n"
    # the mapping, its two keys, the list a (4 nodes) and b (1 + 3 times a's 4 nodes)
    assert measure(text, DEFAULT_LIMITS) == (1 + 2 + 4 + 1 + 3 * 4, 3)
    with pytest.raises(WorkflowValidationError, match=r"flow.yaml:2: the YAML expands to more than 12 nodes"):
        measure(text, ParseLimits(max_nodes=12))


def test_nesting_through_aliases_counts_too() -> None:
    text = "a: &a [[[1]]]\nb: [[*a]]\n"
    assert measure(text, DEFAULT_LIMITS)[1] == 1 + 2 + 3
    with pytest.raises(WorkflowValidationError, match="nested more than 5 levels deep"):
        measure(text, ParseLimits(max_depth=5))


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(
        WorkflowValidationError, match=r"flow.yaml:1: an alias refers to a mapping or list that contains it"
    ):
        measure("a: &a [1, *a]\n", DEFAULT_LIMITS)


def test_text_given_as_a_string_has_the_size_limit_in_characters() -> None:
    with pytest.raises(WorkflowValidationError, match="file too large: 41 characters, over the limit of 40"):
        parse_workflow_text("name: x\nsteps: []\n" + "#" * 23, limits=ParseLimits(max_file_bytes=40))


@pytest.mark.parametrize("raw", ["0", "-5", "lots", "inf", "nan", "1e9"])
def test_an_option_must_be_a_positive_number(raw: str) -> None:
    option = "workflow_max_steps" if raw != "inf" else "workflow_parse_timeout"
    with pytest.raises(ValueError, match=rf"\[agentloom\] {option} = '{raw}': expected a positive"):
        limits_from(lambda name: raw if name == option else None)


def test_options_override_only_what_they_set() -> None:
    values = {"workflow_max_steps": "12", "workflow_parse_timeout": "2.5", "workflow_max_nodes": " "}
    assert limits_from(values.get) == ParseLimits(max_steps=12, parse_timeout=2.5)
