"""``run_workflow`` through the warm runner: the Python API's calls, shipped to a run process.

The call's arguments (the workflow, its tools, the options…) are written as JSON
(:mod:`.shipping`) and sent to the home's runner, whose run process calls ``run_workflow``
itself, in-process, on its warm state. Callbacks come back as JSON messages: each
``on_progress`` event, each ``ask`` question (answered by the caller), and the result or the
exception. Setting the caller's ``stop`` event, or a Ctrl-C in the caller's main thread, stops
the run as it would in-process.

Nothing is pickled either way: even from a runner that is not ours, what the caller reads is
data, never code. What cannot be written as JSON, or not rebuilt in the runner (a tool defined
in ``__main__`` or inside a function, a gateway object), raises :class:`Unshippable`: the caller
then runs in its own process.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_agentloom.runner.warm import client, protocol, shipping
from airflow_provider_agentloom.runner.warm.shipping import Unshippable

if TYPE_CHECKING:
    from airflow_provider_agentloom.runner.approvals import AskGate

__all__ = ["Unshippable", "call_in_runner", "serve_call"]

_STOP_POLL_SECONDS = 0.1
_RESULT_MODELS = "airflow_provider_agentloom.workflow.results"
"""What the run's result and progress events are read into: pydantic and our models, ~75 ms of imports."""


# -- the caller's side -----------------------------------------------------------------------------


def call_in_runner(home: Path, arguments: dict[str, Any]) -> Any:
    """Run ``run_workflow(**arguments)`` in the home's warm runner; return what it returns.

    ``on_progress``, ``ask`` and ``stop`` stay here; every other argument is shipped.
    :raises Unshippable: when the arguments cannot run there (nothing was started).
    """
    on_progress: Callable[[Any, str], None] | None = arguments.pop("on_progress", None)
    ask: AskGate | None = arguments.pop("ask", None)
    stop: threading.Event | None = arguments.pop("stop", None)
    chunk_fd = getattr((arguments.get("run_context_options") or {}).get("llm"), "chunk_fd", None)
    if chunk_fd not in (None, 1, 2):
        raise Unshippable(f"streamed text goes to file descriptor {chunk_fd} of this process")
    document = shipping.call_document(arguments)
    request = {"op": "call", "path": list(sys.path), "call": document, "asks": ask is not None}
    # The caller mostly waits while the run goes on: it imports the result's models meanwhile
    # rather than after the run, when the result arrives (the CLI prints and needs none).
    importing = threading.Thread(target=importlib.import_module, args=(_RESULT_MODELS,), daemon=True)
    importing.start()
    try:
        sock, reply = client.hand_over(home, request)
        with contextlib.closing(sock):
            if "unshippable" in reply:
                raise Unshippable(str(reply["unshippable"]))
            if "pid" not in reply:
                raise client.RunnerUnavailable(
                    f"the warm runner refused the run: {reply.get('error', reply)}"
                )
            return _follow(sock, int(reply["pid"]), on_progress, ask, stop, home)
    finally:
        importing.join()


def _follow(
    sock: socket.socket,
    pid: int,
    on_progress: Callable[[Any, str], None] | None,
    ask: AskGate | None,
    stop: threading.Event | None,
    home: Path,
) -> Any:
    """Relay the run's callbacks until its result (returned) or exception (raised)."""
    stop_sent = False
    sock.settimeout(_STOP_POLL_SECONDS)
    with _forwarding_interrupts(pid):
        while True:
            if stop is not None and stop.is_set() and not stop_sent:
                with contextlib.suppress(OSError):
                    protocol.send(sock, {"stop": True})
                stop_sent = True
            try:
                message, _ = protocol.receive(sock)
            except TimeoutError:
                continue
            except (OSError, protocol.ProtocolError):
                raise client.RunnerUnavailable(client._ended_message(home, "during the run")) from None
            if "returned" in message:
                return _readable(shipping.result_of, message["returned"])
            if "raised" in message:
                raise _readable(shipping.exception_of, message["raised"])
            if "progress" in message and on_progress is not None:
                on_progress(*_readable(shipping.progress_of, message))
            elif "ask" in message:
                question = message.get("question")
                step = str(message["ask"])
                answer = None if ask is None else ask(step, None if question is None else str(question))
                protocol.send(sock, {"answer": answer})


_T = TypeVar("_T")


def _readable(read: Callable[[Any], _T], document: Any) -> _T:
    """``read(document)``; a document it cannot read is the runner's fault, named as such."""
    try:
        return read(document)
    except (KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise client.RunnerUnavailable(f"the warm runner sent a message that cannot be read: {exc}") from None


@contextlib.contextmanager
def _forwarding_interrupts(pid: int) -> Any:
    """In the main thread, Ctrl-C, SIGTERM and SIGHUP go to the run process, as they would stop
    an in-process run (its ``RunInterrupted`` comes back as the call's exception)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with client._forwarding_signals(pid):
        yield


# -- the runner's side ------------------------------------------------------------------------------


def serve_call(connection: socket.socket, request: dict[str, Any]) -> None:  # pragma: no cover - run process
    """In a run process: read the call, run it in-process, send back its callbacks and outcome."""
    try:
        arguments = shipping.call_arguments(dict(request.get("call") or {}))
    except Unshippable as exc:
        protocol.send(connection, {"unshippable": str(exc)})
        return
    protocol.send(connection, {"pid": os.getpid()})
    answers: queue.Queue[bool | None] = queue.Queue()
    stop = threading.Event()
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock:
            protocol.send(connection, message)

    def read() -> None:
        with contextlib.suppress(OSError, protocol.ProtocolError):
            while True:
                message, _ = protocol.receive(connection)
                if message.get("stop"):
                    stop.set()
                if "answer" in message:
                    answer = message["answer"]
                    answers.put(answer if isinstance(answer, bool) else None)
        stop.set()  # the caller went away: the run stops in order
        answers.put(None)

    def progress(result: Any, event: str) -> None:
        send(shipping.progress_document(result, event))

    def ask_caller(step_id: str, question: str | None = None) -> bool | None:
        send({"ask": step_id} if question is None else {"ask": step_id, "question": question})
        return answers.get()

    threading.Thread(target=read, daemon=True).start()
    from airflow_provider_agentloom.runner import run_workflow

    asks = bool(request.get("asks"))
    try:
        result = run_workflow(
            **arguments, on_progress=progress, ask=ask_caller if asks else None, stop=stop, daemon=False
        )
    except BaseException as exc:
        send({"raised": shipping.exception_document(exc)})
        return
    send({"returned": result.model_dump(mode="json")})
