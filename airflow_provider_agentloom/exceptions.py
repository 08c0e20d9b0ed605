"""The one error tree of the package.

::

    AgentLoomError
     ├── WorkflowValidationError      a workflow file does not load (file, line, key, suggestion)
     ├── StepError                    a step failed; ``retryable`` says whether Airflow may retry it
     │    ├── TemplateError           a template that cannot render: broken braces (retryable, as the
     │    │                           spec page says; the loader refuses them) or a format width or
     │    │                           rendered size past the caps (fails at once)
     │    ├── StateKeyMissingError    a whole-value ``state.x`` argument names a missing key (fails at once)
     │    ├── ToolNotFoundError       ``tool_name`` is not registered (fails at once)
     │    ├── ToolError               a tool raised (retryable)
     │    │    └── SandboxViolationError   the sandbox refused a call (retryable, like any tool error)
     │    │         └── KernelSandboxError   ``kernel_sandbox = required`` cannot be met (fails at once)
     │    └── ExpressionError         a router expression is invalid, unsafe or fails (fails at once)
     │         └── NoRouteError       a router matched no condition and has no default (fails at once)
     ├── LLMError                     a model call failed
     │    └── LLMHTTPError            the vendor answered with an HTTP error status
     │    └── (llm.errors)            NoProviderError, CircuitOpenError, AllProvidersFailedError,
     │                                ProviderResponseError, UnsupportedInputError, ReplyTooLargeError,
     │                                FixtureError, and llm.base.StreamError (a vendor's mid-stream error)
     ├── BudgetExceededError          the run spent its ``config.budget_usd``
     ├── PrivateHomeError             a home of ``run``/``serve`` is another user's, or cannot be made
     ├── RunError                     the local runner, the warm runner or ``serve`` failed (not a step)
     │                                runner: HomeConflictError, ApiServerError, RunNotResumable,
     │                                GateAnswerError, ProductionRunError (replay --from-run);
     │                                runner.warm: ProtocolError, RunnerUnavailable (RunnerNotTrusted),
     │                                RunnerBusy, Unshippable; serve: ServeError, ServeUsageError
     ├── UsageError                   (cli.errors) a bad ``agentloom`` command line: exit 2
     └── internal refusals            workflow.graph.GraphError, tools.net.FetchError,
                                      tools.sandbox: HostError, PathEscapeError

Classes that callers caught by a built-in base keep it beside this one (``HostError`` is still a
``ValueError``; ``ProtocolError``, ``RunnerUnavailable``, ``HomeConflictError`` and
``ApiServerError`` are still ``RuntimeError``s). ``runner.RunInterrupted`` stays outside on purpose:
it is a ``KeyboardInterrupt`` (Ctrl-C or kill), which ``except Exception`` must not catch.
``tests/test_error_tree.py`` walks every module and fails on a public exception class outside.

Every error carries ``retryable``; ``operators.base`` is the one place that turns a
non-retryable error into ``AirflowFailException``. Constructor arguments are kept so errors
pickle across processes (Airflow's supervisor and the CLI runner may cross one).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


class AgentLoomError(Exception):
    """Raised for every error of this package; the root of the tree."""

    retryable: bool = True


@dataclass(frozen=True)
class ValidationIssue:
    """One problem found while loading a workflow file."""

    file: str
    line: int | None
    key_path: str
    message: str
    suggestion: str | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        key = f" {self.key_path}:" if self.key_path else ""
        hint = f" (did you mean {self.suggestion}?)" if self.suggestion else ""
        return f"{where}:{key} {self.message}{hint}"


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice nearest to a misspelled ``name`` (a ``ValidationIssue``'s ``suggestion``), or None."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


class WorkflowValidationError(AgentLoomError):
    """Raised when a workflow file cannot be loaded; names every problem with its file and line."""

    retryable = False

    def __init__(self, issues: list[ValidationIssue] | tuple[ValidationIssue, ...]) -> None:
        self.issues = tuple(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))

    def __reduce__(self) -> tuple[type[WorkflowValidationError], tuple[list[ValidationIssue]]]:
        return (type(self), (list(self.issues),))

    @classmethod
    def from_message(cls, file: str, message: str, line: int | None = None) -> WorkflowValidationError:
        """Build an error with one issue that has no key path."""
        return cls([ValidationIssue(file, line, "", message)])

    @property
    def first(self) -> ValidationIssue:
        return self.issues[0]


class StepError(AgentLoomError):
    """Raised when a step fails; ``retryable`` decides whether Airflow retries it."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable

    def __reduce__(self) -> tuple[type[StepError], tuple[str], dict[str, bool]]:
        return (type(self), (str(self),), {"retryable": self.retryable})


class TemplateError(StepError):
    """Raised when a template cannot render: broken braces (an unterminated ``{state.x``), a bad format
    spec, or one that would build a huge string (``{state.x:>100000000}``, not retryable)."""


class StateKeyMissingError(StepError):
    """Raised when a whole-value ``state.x`` argument names a key the state does not have."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)


class ToolNotFoundError(StepError):
    """Raised when a tool step names a tool that is not registered."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)


class ToolError(StepError):
    """Raised when a tool fails: a refused path, a missing argument, a dropped connection."""


class SandboxViolationError(ToolError):
    """Raised when the sandbox refuses a call: ``Sandbox violation (<tool>): <reason>``."""


class KernelSandboxError(SandboxViolationError):
    """Raised under ``kernel_sandbox = required`` when the kernel layer cannot be enforced.

    Not retried: the worker's kernel does not change between attempts.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)


class ExpressionError(StepError):
    """Raised when a router expression is invalid, unsafe, or fails while evaluated."""


class NoRouteError(ExpressionError):
    """Raised when a router matches no condition and has no default; never retried (no attempt can match)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)


class LLMError(AgentLoomError):
    """Raised when a model call fails."""


class LLMHTTPError(LLMError):
    """Raised when an LLM vendor answers with an HTTP error status (``status_code`` 0: no answer).

    ``request_sent`` is False only when the connection failed before any byte of the request left
    (refused, DNS, connect timeout): repeating such a call cannot make the vendor do the work twice.
    """

    def __init__(
        self,
        message: str,
        *,
        vendor: str,
        status_code: int,
        retry_after: float | None = None,
        retryable: bool = True,
        request_sent: bool = True,
    ) -> None:
        super().__init__(message)
        self.vendor = vendor
        self.status_code = status_code
        self.retry_after = retry_after
        self.retryable = retryable
        self.request_sent = request_sent

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild_llm_http_error,
            (str(self), self.vendor, self.status_code, self.retry_after, self.retryable, self.request_sent),
        )


def _rebuild_llm_http_error(
    message: str,
    vendor: str,
    status_code: int,
    retry_after: float | None,
    retryable: bool,
    request_sent: bool = True,
) -> LLMHTTPError:
    return LLMHTTPError(
        message,
        vendor=vendor,
        status_code=status_code,
        retry_after=retry_after,
        retryable=retryable,
        request_sent=request_sent,
    )


class BudgetExceededError(AgentLoomError):
    """Raised when the run has spent its ``config.budget_usd``: ``Budget exceeded: spent $X of $Y limit``."""

    retryable = False

    def __init__(self, spent: float, limit: float) -> None:
        self.spent = spent
        self.limit = limit
        super().__init__(f"Budget exceeded: spent ${spent:.4f} of ${limit:.4f} limit")

    def __reduce__(self) -> tuple[type[BudgetExceededError], tuple[float, float]]:
        return (type(self), (self.spent, self.limit))


class PrivateHomeError(AgentLoomError):
    """Raised when a home of ``agentloom run`` or ``serve`` belongs to another user, or cannot be made.

    The home holds every run's input, logs and secrets: it is never used then.
    """

    retryable = False


class RunError(AgentLoomError):
    """Raised when the machinery around a run fails: the local runner, the warm runner, or ``serve``.

    Not a step's failure (that is a :class:`StepError` inside the run): the run could not be
    driven, resumed or served. Not retried by Airflow: it is raised outside any task.
    """

    retryable = False


class AirflowContractError(AgentLoomError):
    """An Airflow internal that the runner, the loader or serve relies on broke its contract."""
