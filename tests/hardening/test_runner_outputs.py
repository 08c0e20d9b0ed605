"""An output that cannot be stored fails its step, naming the step and the value's type.

Before, ``_plain_json`` turned sets and objects into text without a word, and NaN (which
Airflow's API refuses) was reported as "the task failed before the step started".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import runner_tools

from airflow_provider_agentloom import run_workflow
from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.workflow.parser import WorkflowParser
from airflow_provider_agentloom.workflow.storable import storable_output

REFUSED = {
    "nan": ("the output is the float nan", "float"),
    "inf": ("the output['deep'][1] is the float -inf", "float"),
    "set": ("the output['tags'] is a value of type set", "set"),
    "object": ("the output[0] is a value of type runner_tools._Opaque", "_Opaque"),
    "big_int": ("the output is an int of 22 digits", "int"),
    "tuple_key": ("a key of type tuple", "tuple"),
    "clashing_keys": ("keys 1 and '1' are both '1'", "dict"),
    "reserved_key": ("the key __classname__, which Airflow's XCom reserves", "dict"),
    "bytes": ("a value of type bytes", "bytes"),
    "surrogate": ("a str with a lone surrogate", "str"),
    "too_deep": ("nested deeper than 200 levels", "list"),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_refused_values_name_the_step_the_place_and_the_type(kind: str) -> None:
    with pytest.raises(StepError) as caught:
        storable_output(runner_tools.give(kind), "make_it")
    message = str(caught.value)
    assert message.startswith("Step 'make_it' returned an output that cannot be stored: ")
    where, type_name = REFUSED[kind]
    assert where in message
    assert type_name in message
    assert caught.value.retryable is False


def test_json_data_is_kept_and_what_json_converts_is_converted() -> None:
    plain = {"a": [1, 2.5, "x", None, True, {"b": []}], "": "", "n": -(2**63), "u": 2**64 - 1}
    assert storable_output(plain, "s") == plain
    assert storable_output((1, "two", (3,)), "s") == [1, "two", [3]]
    assert storable_output({7: "seven", True: "yes", None: "none", 2.5: "x"}, "s") == {
        "7": "seven",
        "true": "yes",
        "null": "none",
        "2.5": "x",
    }
    looped: list[Any] = [1]
    looped.append(looped)
    with pytest.raises(StepError, match=r"the output\[1\] is a list that contains itself"):
        storable_output(looped, "s")
    shared = [1]
    assert storable_output([shared, shared], "s") == [[1], [1]]  # the same list twice is not a loop
    assert storable_output(math.pi, "s") == math.pi


@pytest.mark.timeout(180)
def test_an_unstorable_output_fails_its_step_at_once_in_a_run(workdir: Path) -> None:
    kinds = [*sorted(REFUSED), "tuple", "int_keys", "deep"]
    workflow = WorkflowParser.from_yaml(
        f"name: outputs\nconfig: {{max_concurrent_steps: {len(kinds)}}}\nsteps:\n"
        + "".join(
            f"  - {{id: {kind}, type: tool, tool_name: give, tool_args: {{kind: {kind}}},"
            " retry: {max_retries: 2, backoff_max: 0}}\n"
            for kind in kinds
        )
    )
    result = run_workflow(workflow, tools=[runner_tools.give])
    assert result.status == "failed"
    for kind, (where, type_name) in REFUSED.items():
        step = result.step_results[kind]
        assert step.status == "failed", kind
        assert step.attempts == 1, kind  # another attempt would return the same value
        assert step.error is not None
        assert step.error.startswith(f"Step '{kind}' returned an output that cannot be stored"), step.error
        assert where in step.error, step.error
        assert type_name in step.error, step.error
        assert "before the step started" not in step.error
    assert result.step_results["tuple"].output == [1, "two", [3]]
    assert result.step_results["int_keys"].output == {
        "7": "seven",
        "true": "yes",
        "null": "none",
        "2.5": "two and a half",
    }
    deep = result.step_results["deep"].output
    for _ in range(runner_tools.DEEPEST_STORED):
        deep = deep[0]
    assert deep == "core"
