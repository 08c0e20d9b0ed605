"""Hostile dags folders for the loader tests: the one-line loader, a valid neighbour, and the triggers.

Each :class:`Trigger` writes one hostile file (or a few) into a dags folder and says what the
loader must report about it: the words of the error, the line and the key. The same table feeds
the dags-folder tests (Airflow's own DagBag) and the validate-parity test.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOADER_PY = (
    "from airflow_provider_agentloom.dag.loader import load_workflows  # airflow dag loader\n\n"
    "load_workflows(globals())\n"
)
LOADER_FILE = "agentloom_dags.py"
GOOD_FILE = "good.yaml"
GOOD_DAG = "good-flow"
GOOD = """name: good-flow
state: {who: world}
steps:
  - {id: one, type: tool, tool_name: shell_command, tool_args: {command: "echo {state.who}"}}
  - {id: two, type: tool, tool_name: shell_command, depends_on: [one], tool_args: {command: "echo two"}}
"""
STEP = "  - {id: one, type: tool, tool_name: shell_command, tool_args: {command: 'echo one'}}\n"


def dags_folder(base: Path) -> Path:
    """A dags folder holding the one-line loader and one valid workflow, as a user's would."""
    from airflow_provider_agentloom.dag import loader

    folder = base / "dags"
    folder.mkdir()
    (folder / LOADER_FILE).write_text(LOADER_PY)
    (folder / GOOD_FILE).write_text(GOOD)
    loader._CACHE.clear()
    return folder


def bag_of(folder: Path) -> Any:
    """Read ``folder`` with Airflow's own DagBag, as the dag-processor does."""
    from airflow.dag_processing.dagbag import BundleDagBag

    return BundleDagBag(dag_folder=str(folder), bundle_path=str(folder), bundle_name="hostile")


def assert_good_dag_loads(bag: Any) -> None:
    """The valid workflow beside the hostile file is a real DAG, and nothing escaped the loader."""
    assert LOADER_FILE not in bag.import_errors, bag.import_errors.get(LOADER_FILE)
    good = bag.dags[GOOD_DAG]
    assert sorted(good.task_dict) == ["one", "two"]
    assert good.task_dict["two"].upstream_task_ids == {"one"}
    assert "invalid" not in good.tags


def assert_all_serialize(bag: Any) -> None:
    """Every DAG the loader gave Airflow serialises, as the dag-processor does next."""
    from airflow.serialization.serialized_objects import DagSerialization

    for dag in bag.dags.values():
        DagSerialization.to_dict(dag)


def placeholders(bag: Any) -> dict[str, str]:
    """The placeholder DAGs of the bag: DAG id -> the error its only task fails with."""
    return {
        dag_id: dag.task_dict["invalid_workflow"].message
        for dag_id, dag in bag.dags.items()
        if "invalid" in dag.tags
    }


Maker = Callable[[Path], None]


@dataclass(frozen=True)
class Trigger:
    """A hostile file and what the loader must say about it.

    :param name: the test id.
    :param make: writes the hostile file(s) into a dags folder.
    :param words: what the error must say.
    :param line: the line the error names (None: a file-level error, no line).
    :param key: the key path the error names ("" for none).
    :param hostile: the file the import error is recorded under.
    :param located: the file the error's line is in (a subworkflow file), when not ``hostile``.
    :param folder_level: the error comes from the folder (two files), not the file alone.
    :param env: Airflow options for this case (``AIRFLOW__AGENTLOOM__...``).
    :param prime: load the folder once before the hostile file exists (the valid file is cached).
    """

    name: str
    make: Maker
    words: tuple[str, ...]
    line: int | None = None
    key: str = ""
    hostile: str = "hostile.yaml"
    located: str | None = None
    folder_level: bool = False
    env: dict[str, str] = field(default_factory=dict)
    prime: bool = False

    def expected_prefix(self, folder: Path) -> str:
        where = str(folder / (self.located or self.hostile))
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.key}:" if self.key else f"{where}:"


def write(relative: str, content: str | bytes) -> Maker:
    def make(folder: Path) -> None:
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")

    return make


def hostile(content: str | bytes) -> Maker:
    return write("hostile.yaml", content)


def several(*makers: Maker) -> Maker:
    def make(folder: Path) -> None:
        for maker in makers:
            maker(folder)

    return make


def symlink(relative: str, target: str) -> Maker:
    return lambda folder: os.symlink(target, folder / relative)


def fifo(relative: str) -> Maker:
    return lambda folder: os.mkfifo(folder / relative)


def with_config(airflow: str) -> str:
    return f"name: hostile\nconfig:\n  airflow:\n    {airflow}\nsteps:\n{STEP}"


def with_state(state: str) -> str:
    return f"name: hostile\nstate:\n  {state}\nsteps:\n{STEP}"


def with_step(fields: str) -> str:
    return f"name: hostile\nsteps:\n  - {{id: one, type: tool, tool_name: shell_command, {fields}}}\n"


def laughs(levels: int = 9) -> str:
    """The classic "billion laughs": 9 levels of 9 aliases, 9**9 strings from a few hundred bytes."""
    lines = ["name: hostile", "state:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        name, previous = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append(f"  {name}: &{name} [{','.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + f"\nsteps:\n{STEP}"


def chain_files(count: int) -> Maker:
    """``c00.yaml`` includes ``c01.yaml`` ... includes ``c<count-1>.yaml``: nesting across files."""
    makers = []
    for index in range(count):
        if index == count - 1:
            text = f"name: c{index:02d}\nsteps:\n{STEP}"
        else:
            text = (
                f"name: c{index:02d}\nsteps:\n  - id: sub\n    type: subworkflow\n"
                f"    workflow_path: c{index + 1:02d}.yaml\n"
            )
        makers.append(write(f"c{index:02d}.yaml", text))
    return several(*makers)


def many_steps(count: int) -> str:
    steps = "".join(f"  - {{id: s{i}, type: tool, tool_name: shell_command}}\n" for i in range(count))
    return f"name: hostile\nsteps:\n{steps}"


SUBWORKFLOW = "name: hostile\nsteps:\n{step}  - id: sub\n    type: subworkflow\n    workflow_path: {path}\n"


def subworkflow_of(path: str) -> str:
    return SUBWORKFLOW.format(step=STEP, path=path)


TRIGGERS: list[Trigger] = [
    # -- the list -------------------------------------------------------------------
    Trigger(
        "non_utf8_yaml",
        hostile(b"name: hostile\nsteps: []\n# caf\xe9\n"),
        ("not UTF-8 text: byte 0xe9 at line 3, column 6",),
        line=3,
    ),
    Trigger(
        "non_utf8_config_of_another_tool",
        write("other/tool.yml", b"\xff\xfeu\x00s\x00e\x00r\x00:\x00 \x00x\x00\n\x00"),
        ("not UTF-8 text: byte 0xff at line 1, column 1",),
        line=1,
        hostile="other/tool.yml",
    ),
    Trigger(
        "self_referencing_alias",
        hostile("name: hostile\nstate: &loop\n  me: *loop\nsteps: []\n"),
        ("an alias refers to a mapping or list that contains it",),
        line=2,
    ),
    Trigger(
        "dag_id_with_spaces",
        hostile(with_config("dag_id: 'bad id!'")),
        ("'bad id!' is not a DAG id Airflow accepts", "(did you mean bad_id_?)"),
        line=4,
        key="config.airflow.dag_id",
    ),
    Trigger(
        "tag_over_100_characters",
        hostile(with_config(f"tags: [ok, {'t' * 101}]")),
        ("has 101 characters: Airflow allows at most 100",),
        line=4,
        key="config.airflow.tags[1]",
    ),
    Trigger(
        "backoff_max_1e300",
        hostile(with_step("retry: {backoff_max: 1.0e+300}")),
        ("less than or equal to 31622400", "got float 1e+300"),
        line=3,
        key="steps[0].retry.backoff_max",
    ),
    Trigger(
        "subworkflow_path_to_a_binary_file",
        several(write("blob.bin", bytes(range(256))), hostile(subworkflow_of("blob.bin"))),
        ("workflow_path 'blob.bin': not UTF-8 text (a workflow file must be UTF-8 YAML)",),
        line=6,
        key="steps[1].workflow_path",
    ),
    # -- schedules --------------------------------------------------------------------------
    Trigger(
        "schedule_in_words",
        hostile(with_config("schedule: every tuesday")),
        ("'every tuesday' is not a schedule Airflow accepts", "Exactly 5, 6 or 7 columns"),
        line=4,
        key="config.airflow.schedule",
    ),
    Trigger(
        "schedule_preset_typo",
        hostile(with_config("schedule: '@hourlyy'")),
        ("'@hourlyy' is not a schedule Airflow accepts", "(did you mean @hourly?)"),
        line=4,
        key="config.airflow.schedule",
    ),
    Trigger(
        "schedule_out_of_range",
        hostile(with_config("schedule: '61 * * * *'")),
        ("is not a schedule Airflow accepts", "out of range"),
        line=4,
        key="config.airflow.schedule",
    ),
    Trigger(
        "schedule_that_never_fires",
        hostile(with_config("schedule: '0 0 30 2 *'")),
        ("the schedule '0 0 30 2 *' never fires",),
        line=4,
        key="config.airflow.schedule",
    ),
    Trigger(
        "schedule_continuous_without_one_active_run",
        hostile(with_config("schedule: '@continuous'")),
        ("set config.airflow.max_active_runs: 1",),
        line=4,
        key="config.airflow.schedule",
    ),
    Trigger(
        "schedule_not_a_string",
        hostile(with_config("schedule: 5")),
        ("expected a valid string, got int 5",),
        line=4,
        key="config.airflow.schedule",
    ),
    # -- resource bombs -----------------------------------------------------------------------
    Trigger(
        "billion_laughs",
        hostile(laughs()),
        ("the YAML expands to more than 200,000 nodes", "[agentloom] workflow_max_nodes"),
        line=8,
    ),
    Trigger(
        "nesting_past_the_depth_limit",
        hostile(f"name: hostile\nstate: {{a: {'[' * 70}{']' * 70}}}\nsteps:\n{STEP}"),
        ("nested more than 64 levels deep", "[agentloom] workflow_max_depth"),
        line=2,
    ),
    Trigger(
        "nesting_past_libyaml",
        hostile(f"name: hostile\nstate: {{a: {'[' * 5000}{']' * 5000}}}\nsteps:\n{STEP}"),
        ("YAML syntax error", "exceeded maximum nesting depth"),
        line=2,
    ),
    Trigger(
        "file_over_the_size_limit",
        hostile("name: hostile\nsteps: []\n" + "# padding\n" * 430_000),
        (
            "file too large: 4,300,024 bytes, over the limit of 4,194,304",
            "[agentloom] workflow_max_file_bytes",
        ),
    ),
    Trigger(
        "more_steps_than_the_limit",
        hostile(many_steps(5001)),
        ("more than 5,000 steps", "[agentloom] workflow_max_steps"),
        line=2,
        key="steps",
    ),
    Trigger(
        "subworkflow_files_nested_past_the_depth_limit",
        several(write("hostile.yaml", subworkflow_of("c00.yaml")), chain_files(25)),
        ("nested more than 64 levels deep",),
        line=3,
        located="c20.yaml",
    ),
    Trigger(
        "parse_slower_than_its_timeout",
        hostile(many_steps(3000)),
        ("loading took longer than 0.001 s", "[agentloom] workflow_parse_timeout"),
        env={"AIRFLOW__AGENTLOOM__WORKFLOW_PARSE_TIMEOUT": "0.001"},
        prime=True,  # the valid neighbour is parsed (and cached) before the limit is this tight
    ),
    # -- not a regular, readable file -----------------------------------------------------------
    Trigger(
        "fifo_named_like_a_workflow",
        fifo("hostile.yaml"),
        ("it is a FIFO (named pipe), not a regular file",),
    ),
    Trigger(
        "symlink_to_dev_zero",
        symlink("hostile.yaml", "/dev/zero"),
        ("it is a character device, not a regular file",),
    ),
    Trigger(
        "dangling_symlink",
        symlink("hostile.yaml", "gone.yaml"),
        ("broken symbolic link: its target 'gone.yaml' does not exist",),
    ),
    Trigger(
        "symlink_loop",
        symlink("hostile.yaml", "hostile.yaml"),
        ("cannot read file: Too many levels of symbolic links",),
    ),
    Trigger(
        "subworkflow_path_to_a_fifo",
        several(fifo("pipe"), hostile(subworkflow_of("pipe"))),
        ("workflow_path 'pipe': cannot read file: it is a FIFO",),
        line=6,
        key="steps[1].workflow_path",
    ),
    Trigger(
        "subworkflow_path_to_dev_zero",
        hostile(subworkflow_of("/dev/zero")),
        ("workflow_path '/dev/zero' is outside the folders a workflow may name",),
        line=6,
        key="steps[1].workflow_path",
    ),
    Trigger(
        "subworkflow_path_to_a_file_that_is_not_a_workflow",
        several(write("notes.txt", "secret: s3cr3t-canary\n"), hostile(subworkflow_of("notes.txt"))),
        ("workflow_path 'notes.txt' is not a workflow file (no top-level 'name:' or 'steps:' key)",),
        line=6,
        key="steps[1].workflow_path",
    ),
    Trigger(
        "subworkflow_link_out_of_the_folder",
        several(symlink("child.link", "/etc/hostname"), hostile(subworkflow_of("child.link"))),
        ("workflow_path 'child.link' is outside the folders a workflow may name",),
        line=6,
        key="steps[1].workflow_path",
    ),
    # -- not YAML, or YAML that is not JSON ------------------------------------------------------
    Trigger(
        "nul_character",
        hostile(f'name: hostile\nstate: {{x: "a\x00b"}}\nsteps:\n{STEP}'),
        ("not YAML text: character #x0000",),
        line=2,
    ),
    Trigger(
        "impossible_date",
        hostile(with_state("due: 2026-02-30")),
        ("cannot read the value '2026-02-30': day is out of range for month",),
        line=3,
    ),
    Trigger(
        "integer_with_5000_digits",
        hostile(with_state(f"n: {'9' * 5000}")),
        ("cannot read the value '99999999999999999999...9999999999 (5,000 characters)'", "4300 digits"),
        line=3,
    ),
    Trigger(
        "python_object_tag",
        hostile(with_state("x: !!python/object/apply:os.system [id]")),
        ("could not determine a constructor for the tag",),
        line=3,
    ),
    Trigger(
        "two_yaml_documents",
        hostile(f"name: hostile\nsteps:\n{STEP}---\nname: second\n"),
        ("expected a single document",),
        line=4,
    ),
    Trigger(
        "duplicate_yaml_key",
        hostile(f"name: hostile\nname: again\nsteps:\n{STEP}"),
        ("found duplicate key 'name'",),
        line=2,
    ),
    Trigger(
        "infinity_in_state",
        hostile(with_state("x: .inf")),
        ("inf is not a JSON number",),
        line=3,
        key="state.x",
    ),
    Trigger(
        "binary_in_tool_args",
        hostile(with_step("tool_args: {data: !!binary aGVsbG8=}")),
        ("a !!binary value cannot travel as JSON",),
        line=3,
        key="steps[0].tool_args.data",
    ),
    Trigger(
        "set_in_state",
        hostile(with_state("x: !!set {a, b}")),
        ("a !!set cannot travel as JSON (use a list)",),
        line=3,
        key="state.x",
    ),
    Trigger(
        "nan_timeout",
        hostile(with_step("timeout: .nan")),
        ("expected a finite number, got float nan",),
        line=3,
        key="steps[0].timeout",
    ),
    # -- the wrong shape ------------------------------------------------------------------------
    Trigger(
        "top_level_list",
        hostile("- name: hostile\n- steps: []\n"),
        ("not a workflow: no top-level 'name:' or 'steps:' key",),
    ),
    Trigger("empty_file", hostile(""), ("not a workflow",)),
    Trigger(
        "name_is_a_number",
        hostile(f"name: 12\nsteps:\n{STEP}"),
        ("expected a valid string, got int 12",),
        line=1,
        key="name",
    ),
    Trigger(
        "state_key_not_a_string",
        hostile(with_state("1: x")),
        ("expected a valid string, got int 1",),
        line=3,
        key="state[1]",
    ),
    Trigger(
        "nested_state_key_not_a_string",
        hostile(with_state("x: {2026-01-01: new year}")),
        ("the key 2026-01-01 is a date: keys must be strings",),
        line=3,
        key="state.x.2026-01-01",
    ),
    Trigger(
        "tags_not_a_list",
        hostile(with_config("tags: ops")),
        ("expected a valid list, got str 'ops'",),
        line=4,
        key="config.airflow.tags",
    ),
    Trigger(
        "steps_not_a_list",
        hostile("name: hostile\nsteps: {one: {type: tool}}\n"),
        ("expected a valid list",),
        line=2,
        key="steps",
    ),
    # -- ids -------------------------------------------------------------------------------------
    Trigger(
        "step_ids_collide_after_sanitising",
        hostile(
            "name: hostile\nsteps:\n  - {id: a b, type: tool, tool_name: shell_command}\n"
            "  - {id: a_b, type: tool, tool_name: shell_command}\n"
        ),
        ("step ids 'a b' (line 3) and 'a_b' both become the Airflow task id 'a_b'",),
        line=4,
        key="steps[1].id",
    ),
    Trigger(
        "emoji_step_ids_collide",
        hostile(
            "name: hostile\nsteps:\n  - {id: '\U0001f680', type: tool, tool_name: shell_command}\n"
            "  - {id: '\U0001f525', type: tool, tool_name: shell_command}\n"
        ),
        ("step ids '\U0001f680' (line 3) and '\U0001f525' both become the Airflow task id '_'",),
        line=4,
        key="steps[1].id",
    ),
    Trigger(
        "name_dot_dot",
        hostile(f"name: '..'\nsteps:\n{STEP}"),
        ("the name '..' gives the DAG id '..', which cannot name a folder",),
        line=1,
        key="name",
    ),
    Trigger(
        "dag_id_dot",
        hostile(with_config("dag_id: '.'")),
        ("the DAG id '.' cannot name a folder",),
        line=4,
        key="config.airflow.dag_id",
    ),
    Trigger(
        "dag_id_of_another_file",
        several(write("alpha.yaml", f"name: alpha\nsteps:\n{STEP}"), hostile(with_config("dag_id: alpha"))),
        ("has the DAG id 'alpha', already used by", "alpha.yaml"),
        folder_level=True,
    ),
    # -- numbers -------------------------------------------------------------------------------
    Trigger(
        "negative_retries",
        hostile(with_step("retry: {max_retries: -1}")),
        ("greater than or equal to 0",),
        line=3,
        key="steps[0].retry.max_retries",
    ),
    Trigger(
        "absurd_retries",
        hostile(with_step("retry: {max_retries: 100000000000000000000}")),
        ("less than or equal to 1000",),
        line=3,
        key="steps[0].retry.max_retries",
    ),
    Trigger(
        "step_timeout_1e300",
        hostile(with_step("timeout: 1.0e+300")),
        ("less than or equal to 31622400",),
        line=3,
        key="steps[0].timeout",
    ),
    Trigger(
        "dagrun_timeout_1e300",
        hostile(with_config("dagrun_timeout: 1.0e+300")),
        ("less than or equal to 31622400",),
        line=4,
        key="config.airflow.dagrun_timeout",
    ),
    Trigger(
        "max_active_runs_past_the_database",
        hostile(with_config("max_active_runs: 100000000000000000000")),
        ("less than or equal to 2147483647",),
        line=4,
        key="config.airflow.max_active_runs",
    ),
    Trigger(
        "max_concurrent_steps_zero",
        hostile(f"name: hostile\nconfig: {{max_concurrent_steps: 0}}\nsteps:\n{STEP}"),
        ("greater than or equal to 1",),
        line=2,
        key="config.max_concurrent_steps",
    ),
    Trigger(
        "owner_longer_than_airflow_stores",
        hostile(with_config(f"owner: {'o' * 501}")),
        ("at most 500 characters",),
        line=4,
        key="config.airflow.owner",
    ),
    # -- subworkflows and expressions --------------------------------------------------------------
    Trigger(
        "subworkflow_cycle_across_files",
        several(
            write(
                "a.yaml",
                f"name: a\nsteps:\n{STEP}  - {{id: sub, type: subworkflow, workflow_path: b.yaml}}\n",
            ),
            write("b.yaml", "name: b\nsteps:\n  - {id: sub, type: subworkflow, workflow_path: a.yaml}\n"),
        ),
        ("workflow_path 'a.yaml' includes itself",),
        line=3,
        key="steps[0].workflow_path",
        hostile="a.yaml",
        located="b.yaml",
    ),
    Trigger(
        "router_expression_nested_too_deep",
        hostile(
            f"name: hostile\nsteps:\n{STEP}  - id: route\n    type: router\n    depends_on: [one]\n"
            f"    conditions: [{{expression: '{'(' * 300}1{')' * 300}', target: one}}]\n"
        ),
        ("too many nested parentheses",),
        line=7,
        key="steps[1].conditions[0].expression",
    ),
]

# Files that used to take every DAG of the folder down (or be lost) and now load as DAGs.
NOW_LOADING: list[tuple[str, Maker, str]] = [
    (
        "approval_gate_step",
        hostile(f"name: hostile\nsteps:\n{STEP}  - {{id: gate, type: approval_gate, depends_on: [one]}}\n"),
        "hostile",
    ),
    ("unquoted_date_in_state", hostile(with_state("since: 2026-01-01")), "hostile"),
    ("datetime_in_state", hostile(with_state("at: 2026-01-01 10:00:00")), "hostile"),
    ("date_nested_in_state", hostile(with_state("window: {dates: [2026-01-01, 2026-01-02]}")), "hostile"),
    (
        "template_index_with_5000_digits",
        hostile(with_step(f"tool_args: {{command: 'echo {{state.x[{'9' * 5000}]}}'}}")),
        "hostile",
    ),
    (
        "unicode_ids",
        hostile("name: flöw\nsteps:\n  - {id: ünï, type: tool, tool_name: shell_command}\n"),
        "flöw",
    ),
    (
        "chain_of_1500_steps_listed_backwards",
        hostile(
            "name: hostile\nsteps:\n"
            + "".join(
                f"  - {{id: s{i}, type: tool, tool_name: shell_command"
                f"{f', depends_on: [s{i - 1}]' if i else ''}}}\n"
                for i in reversed(range(1500))
            )
        ),
        "hostile",
    ),
    (
        "huge_description",
        hostile(f"name: hostile\ndescription: {'x' * 1_000_000}\nsteps:\n{STEP}"),
        "hostile",
    ),
    ("state_nested_to_the_depth_limit", hostile(with_state(f"x: {'[' * 61}{']' * 61}")), "hostile"),
]
