"""``InvalidWorkflowOperator``: the one task of the placeholder DAG that stands for a broken workflow file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

if TYPE_CHECKING:
    from airflow.sdk import Context


class InvalidWorkflowOperator(BaseOperator):
    """Fail with the reason the workflow file does not load (file, line, key and the fix).

    :param message: the validation error of the workflow file.
    """

    ui_color = "#f8d7da"

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def execute(self, context: Context) -> None:
        raise AirflowFailException(f"This workflow file does not load, so it cannot run:\n{self.message}")
