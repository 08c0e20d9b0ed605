"""The live-stack modules share one Airflow stack, from here (``e2e_support.SharedStack``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import SharedStacks, StackPart


@pytest.fixture(scope="session")
def shared_stacks(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SharedStacks]:
    stacks = SharedStacks(request.session, tmp_path_factory)
    yield stacks
    stacks.stop()  # what the last module using a stack did not stop (it failed or was skipped early)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of a shared stack run one after the other, so that no other stack runs beside it."""
    here = Path(__file__).parent
    places = [index for index, item in enumerate(items) if item.path.parent == here]

    def on_its_own(item: pytest.Item) -> bool:  # the modules with a stack of their own come after
        return not isinstance(getattr(getattr(item, "module", None), "STACK_PART", None), StackPart)

    ordered = sorted((items[index] for index in places), key=on_its_own)  # stable: the order within each
    for index, item in zip(places, ordered, strict=True):
        items[index] = item
