"""``run_workflow`` through the warm runner: the Python API's calls, shipped to a run process.

The call's arguments (the workflow, its tools, the gateway…) are pickled and sent to the
home's runner, whose run process calls ``run_workflow`` itself, in-process, on its warm state.
Callbacks come back as messages: each ``on_progress`` event, each ``ask`` question (answered by
the caller), and the result or the exception, pickled. Setting the caller's ``stop`` event, or a
Ctrl-C in the caller's main thread, stops the run as it would in-process.

Pickle is safe here: both ends are the same code (the runner's fingerprint says so) and the
same user (``SO_PEERCRED``). What cannot be pickled, or not read back in the runner (a tool
defined in ``__main__`` or inside a function), raises :class:`Unshippable`: the caller then
runs in its own process.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import os
import pickle  # noqa: TID251  (between two processes of this same code and user: see the module doc)
import queue
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.runner.daemon import client, protocol

_STOP_POLL_SECONDS = 0.1
_RESULT_MODELS = "airflow_provider_agentloom.workflow.results"
"""What the run's result and progress events unpickle into: pydantic and our models, ~75 ms of imports."""


class Unshippable(Exception):
    """Raised when a call's arguments cannot be run in the warm runner (the reason is the message)."""


def _pack(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).decode()


def _unpack(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


# -- the caller's side -----------------------------------------------------------------------------


def call_in_runner(home: Path, arguments: dict[str, Any]) -> Any:
    """Run ``run_workflow(**arguments)`` in the home's warm runner; return what it returns.

    ``on_progress``, ``ask`` and ``stop`` stay here; every other argument is shipped.
    :raises Unshippable: when the arguments cannot run there (nothing was started).
    """
    on_progress: Callable[[Any, str], None] | None = arguments.pop("on_progress", None)
    ask: Callable[[str], bool | None] | None = arguments.pop("ask", None)
    stop: threading.Event | None = arguments.pop("stop", None)
    chunk_fd = getattr((arguments.get("run_context_options") or {}).get("llm"), "chunk_fd", None)
    if chunk_fd not in (None, 1, 2):
        raise Unshippable(f"streamed text goes to file descriptor {chunk_fd} of this process")
    try:
        payload = _pack({**arguments, "asks": ask is not None})
    except Exception as exc:
        raise Unshippable(f"the arguments cannot be pickled: {exc}") from None
    request = {"op": "call", "path": list(sys.path), "payload": payload}
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
    ask: Callable[[str], bool | None] | None,
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
            if "progress" in message:
                if on_progress is not None:
                    on_progress(*_unpack(message["progress"]))
            elif "ask" in message:
                answer = ask(str(message["ask"])) if ask is not None else None
                protocol.send(sock, {"answer": answer})
            elif "returned" in message:
                return _unpack(message["returned"])
            elif "raised" in message:
                raise _unpack(message["raised"])


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
        arguments = _unpack(str(request.get("payload") or ""))
    except Exception as exc:
        protocol.send(connection, {"unshippable": f"the runner cannot read the arguments: {exc}"})
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
                    answers.put(message["answer"])
        stop.set()  # the caller went away: the run stops in order
        answers.put(None)

    def progress(result: Any, event: str) -> None:
        send({"progress": _pack((result, event))})

    def ask_caller(step_id: str) -> bool | None:
        send({"ask": step_id})
        return answers.get()

    threading.Thread(target=read, daemon=True).start()
    from airflow_provider_agentloom.runner import run_workflow

    asks = arguments.pop("asks", False)
    try:
        result = run_workflow(
            **arguments, on_progress=progress, ask=ask_caller if asks else None, stop=stop, daemon=False
        )
    except BaseException as exc:
        send({"raised": _pack_exception(exc)})
        return
    send({"returned": _pack(result)})


def _pack_exception(exc: BaseException) -> str:
    try:
        return _pack(exc)
    except Exception:
        return _pack(RuntimeError(f"{type(exc).__name__}: {exc}"))
