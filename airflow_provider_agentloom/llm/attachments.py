"""Resolve an ``llm_call`` step's ``attachments`` into the ``AttachmentData`` the model clients send.

Reference §4.6, with the sandbox rules of the seed tools page ("What it covers": attachment
downloads and attachment files). Each attachment's ``source`` is rendered first (it is a template),
then read as:

1. **an http(s) URL** (any ``scheme://`` counts as a URL; only http and https pass the check).
   The URL goes through ``ToolSandbox.validate_attachment_url`` whether the sandbox is enabled or
   not: ``allow_network: false`` refuses it, ``allowed_domains`` (when set) must list the host
   exactly and without regard to case (the seed page's network rule; upstream compared
   case-sensitively), and internal addresses are refused. **A host listed in
   ``allowed_domains`` that is or resolves to an internal address is still refused**: the page's
   attachment row says "allow_network, allowed_domains, no internal addresses" for both columns,
   and the "listed host is reached even when internal" rule belongs to ``http_request`` only.

   - ``fetch: local`` (default): downloaded by ``tools.net.fetch``, whose client connects to the
     addresses the check resolved (no second DNS look-up; Host header and TLS name kept).
     Redirects are followed by hand, at most :data:`MAX_REDIRECTS`, each new URL checked again the
     same way. The body is capped while it streams (a ``Content-Length`` over the cap is refused
     before any of it is read). The whole download, redirects included, must finish within
     ``timeout`` seconds. A non-2xx answer is an error.
   - ``fetch: provider``: the same check, nothing downloaded; the URL is passed on for the model's
     vendor to fetch. Images only: a pdf or audio attachment with ``fetch: provider`` is an error
     (raised before any check). ``allow_network: false`` refuses it too.

2. **a** ``data:<media type>;base64,<data>`` **URL**: its data, inline.
3. **raw base64** (upstream's rule): longer than 64 characters, valid standard base64 and not
   starting with ``/``, ``~`` or ``.``. Line breaks inside are dropped first (wrapped base64 works);
   the data must decode, and its decoded size counts against the cap. One widening: base64 that
   starts with ``/`` is data when its bytes start with a known file signature — every JPEG's
   base64 starts with ``/9j/``, which upstream's rule reads as an absolute path.
4. **otherwise a local file**: relative paths start at the sandbox's ``base_dir`` (the directory
   you run from), a leading ``~`` is expanded. With the sandbox enabled the file must be readable
   per ``ToolSandbox.validate_path`` (under ``allowed_paths`` or ``readable_paths``; with no path
   lists nothing can be read, as for ``file_read`` — unlike upstream, which then allows any file).
   Only regular files are read, at most ``max_bytes``.

``fetch`` only matters for URLs: a path or inline data is always resolved here.

**Media type**: the explicit ``media_type`` > (downloads only) the response's ``Content-Type``
without parameters, unless empty or ``application/octet-stream`` > the file name's extension in
:data:`EXTENSION_MEDIA_TYPES` (a URL's path: the final URL after redirects, then the original) >
``mimetypes.guess_type`` > the data's leading bytes (:func:`sniff_media_type`: PNG, JPEG, GIF,
WebP, PDF, WAV, MP3, Ogg, FLAC, M4A) > :data:`DEFAULT_MEDIA_TYPES` by type (``image/png``,
``application/pdf``, ``audio/wav``, upstream's defaults). A ``data:`` URL's own media type counts
as explicit when ``media_type`` is not set. Sniffing comes after every name-based guess, so it only
replaces upstream's blind default — inline base64 of a JPEG is sent as ``image/jpeg``, not
``image/png``.

**Errors.** A sandbox refusal raises ``SandboxViolationError("Sandbox violation (attachment):
attachment <i> (<source>): <reason>")``; anything else raises ``StepError("Attachment <i>
(<source>): <reason>")``. Both are retryable, as the page says ("An attachment — the step fails,
and is retried"). The source in a message is a description, never the data: inline data shows as
its length, a URL loses its user info and query, a long path is shortened, in the reason too
(the original exception is not chained, since its text holds the raw source). Errors the
``render`` callable raises (``TemplateError``, …) pass through unchanged; anything else it raises
becomes a ``StepError``.

Nothing here imports Airflow.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import re
import stat
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
import anyio.to_thread

from airflow_provider_agentloom.exceptions import AgentLoomError, SandboxViolationError, StepError
from airflow_provider_agentloom.llm.types import AttachmentData
from airflow_provider_agentloom.tools.net import ClientFactory, FetchError, client_for, fetch, size_limit
from airflow_provider_agentloom.tools.sandbox.policy import ToolSandbox
from airflow_provider_agentloom.workflow.models import Attachment

__all__ = [
    "DEFAULT_MEDIA_TYPES",
    "DOWNLOAD_TIMEOUT",
    "EXTENSION_MEDIA_TYPES",
    "MAX_ATTACHMENT_BYTES",
    "MAX_REDIRECTS",
    "ClientFactory",
    "decode_inline_base64",
    "describe_source",
    "guess_media_type",
    "resolve_attachment",
    "resolve_attachments",
    "sniff_media_type",
]

AttachmentType = Literal["image", "pdf", "audio"]

#: The largest attachment, downloaded, read or inline (decoded), in bytes.
MAX_ATTACHMENT_BYTES = 20 * 1024 * 1024
#: Seconds a whole download may take, redirects included.
DOWNLOAD_TIMEOUT = 30.0
#: Redirects a download follows; one more is an error.
MAX_REDIRECTS = 5
#: Inline base64 must be longer than this (upstream's rule).
INLINE_MIN_LENGTH = 64

#: File extensions (lower case) → media type; consulted before ``mimetypes``, whose answers vary
#: with the machine's ``mime.types`` files.
EXTENSION_MEDIA_TYPES: dict[str, str] = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
    ".svg": "image/svg+xml",
    ".heic": "image/heic",
    ".heif": "image/heif",
    ".pdf": "application/pdf",
    ".wav": "audio/wav",
    ".mp3": "audio/mpeg",
    ".m4a": "audio/mp4",
    ".aac": "audio/aac",
    ".ogg": "audio/ogg",
    ".oga": "audio/ogg",
    ".opus": "audio/opus",
    ".flac": "audio/flac",
    ".aiff": "audio/aiff",
    ".webm": "audio/webm",
}

#: The media type of last resort, by attachment type (upstream's defaults).
DEFAULT_MEDIA_TYPES: dict[str, str] = {
    "image": "image/png",
    "pdf": "application/pdf",
    "audio": "audio/wav",
}

_UNINFORMATIVE_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_DATA_URL = re.compile(r"data:([^,;]*)((?:;[^,;]*)*),(.*)", re.DOTALL | re.IGNORECASE)
_REQUEST_HEADERS = {"Accept": "*/*", "Accept-Encoding": "identity"}
_LABEL_LIMIT = 120

#: Leading bytes → media type, for data that has no name (checked in order).
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"ID3", "audio/mpeg"),
)
_RIFF_FORMS = {b"WEBP": "image/webp", b"WAVE": "audio/wav"}


def _identity(text: str) -> str:
    return text


class _Problem(Exception):
    """A resolution failure that is not a sandbox refusal; the caller adds the index and source."""


@dataclass(frozen=True)
class _Options:
    sandbox: ToolSandbox
    max_bytes: int
    timeout: float
    client_factory: ClientFactory


# ------------------------------------------------------------------------------------ public API


async def resolve_attachments(
    attachments: Sequence[Attachment],
    *,
    sandbox: ToolSandbox,
    render: Callable[[str], str] = _identity,
    max_bytes: int = MAX_ATTACHMENT_BYTES,
    timeout: float = DOWNLOAD_TIMEOUT,
    client_factory: ClientFactory = client_for,
) -> list[AttachmentData]:
    """Resolve a step's attachments, in order, into what the model clients send.

    :param attachments: the step's ``attachments``.
    :param sandbox: the run's sandbox; its attachment rules apply whether it is enabled or not, and
        relative paths start at its ``base_dir``.
    :param render: renders a ``source`` template (the caller's template renderer).
    :param max_bytes: the cap on each attachment's size, in bytes.
    :param timeout: seconds each download may take, redirects included.
    :param client_factory: builds the HTTP client for a checked target; tests pass one that routes
        the checked addresses to a loopback server.
    :raises SandboxViolationError: the sandbox refused a URL or a path.
    :raises StepError: any other failure, naming the attachment's index and source.
    """
    resolved: list[AttachmentData] = []
    for index, attachment in enumerate(attachments):
        resolved.append(
            await resolve_attachment(
                attachment,
                index=index,
                sandbox=sandbox,
                render=render,
                max_bytes=max_bytes,
                timeout=timeout,
                client_factory=client_factory,
            )
        )
    return resolved


async def resolve_attachment(
    attachment: Attachment,
    *,
    index: int = 0,
    sandbox: ToolSandbox,
    render: Callable[[str], str] = _identity,
    max_bytes: int = MAX_ATTACHMENT_BYTES,
    timeout: float = DOWNLOAD_TIMEOUT,
    client_factory: ClientFactory = client_for,
) -> AttachmentData:
    """Resolve one attachment; ``index`` is its position in the step, used in error messages."""
    source = _render(attachment.source, render, index).strip()
    options = _Options(sandbox=sandbox, max_bytes=max_bytes, timeout=timeout, client_factory=client_factory)
    try:
        if not source:
            raise _Problem("the source is empty")
        return await _resolve(attachment, source, options)
    except SandboxViolationError as exc:
        label = describe_source(source)
        reason = _without_source(str(exc).removeprefix("Sandbox violation (attachment): "), source, label)
        raise SandboxViolationError(
            f"Sandbox violation (attachment): attachment {index} ({label}): {reason}"
        ) from None
    except _Problem as exc:
        label = describe_source(source)
        raise StepError(f"Attachment {index} ({label}): {_without_source(str(exc), source, label)}") from None


def describe_source(source: str) -> str:
    """Describe a source for an error message without its data or a URL's secrets.

    Inline data (raw base64 or a ``data:`` URL) becomes ``inline data (N characters)``; a URL loses
    its user info and its query (shown as ``?…``); anything longer than 120 characters is shortened.
    """
    if source[:5].lower() == "data:" or decode_inline_base64(source) is not None:
        return f"inline data ({len(source)} characters)"
    if _URL.match(source):
        return _shorten(_redacted_url(source))
    return _shorten(source)


def decode_inline_base64(source: str) -> tuple[str, bytes] | None:
    """Return ``(base64 text, bytes)`` when ``source`` is raw base64 by upstream's rule, else None.

    The rule: longer than 64 characters (line breaks dropped), valid standard base64 (padding
    included), not starting with ``/``, ``~`` or ``.``. One exception: base64 starting with ``/``
    counts when its bytes start with a known file signature (:func:`sniff_media_type`), because
    every JPEG's base64 starts with ``/9j/`` and upstream's rule reads it as a path.
    """
    if source[:1] in ("~", "."):
        return None
    compact = source.replace("\r", "").replace("\n", "")
    if len(compact) <= INLINE_MIN_LENGTH:
        return None
    try:
        raw = base64.b64decode(compact, validate=True)
    except ValueError:
        return None
    if compact.startswith("/") and sniff_media_type(raw) is None:
        return None
    return compact, raw


def guess_media_type(name: str, attachment_type: str = "image", data: bytes | None = None) -> str:
    """Guess a media type from a file name, then the data's leading bytes, then the type's default."""
    return (
        _media_type_from_name(name) or sniff_media_type(data or b"") or _default_media_type(attachment_type)
    )


def sniff_media_type(data: bytes) -> str | None:
    """Return the media type the leading bytes of ``data`` announce, or None when unknown."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] in _RIFF_FORMS:
        return _RIFF_FORMS[data[8:12]]
    if data[4:8] == b"ftyp" and data[8:11] == b"M4A":
        return "audio/mp4"
    # An MPEG audio frame: 11 sync bits, then a layer that is not 0 (0 is AAC's ADTS).
    if len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0 and data[1] & 0x06:
        return "audio/mpeg"
    return None


# ------------------------------------------------------------------------------------- resolution


def _render(source: str, render: Callable[[str], str], index: int) -> str:
    try:
        rendered = render(source)
    except AgentLoomError:
        raise
    except Exception as exc:
        raise StepError(f"Attachment {index}: its source cannot be rendered: {exc}") from exc
    if not isinstance(rendered, str):
        raise StepError(f"Attachment {index}: its source rendered to {type(rendered).__name__}, not a string")
    return rendered


async def _resolve(attachment: Attachment, source: str, options: _Options) -> AttachmentData:
    if _URL.match(source):
        if attachment.fetch == "provider":
            return await _pass_url(attachment, source, options)
        return await _download_attachment(attachment, source, options)
    explicit = (attachment.media_type or "").strip()
    if source[:5].lower() == "data:":
        media_type, data = _data_url(source)
        return _inline(attachment.type, explicit or media_type, data, options.max_bytes)
    inline = decode_inline_base64(source)
    if inline is not None:
        return _inline(attachment.type, explicit, inline, options.max_bytes)
    return await _read_attachment_file(attachment, source, options)


def _inline(kind: AttachmentType, explicit: str, inline: tuple[str, bytes], max_bytes: int) -> AttachmentData:
    text, raw = inline
    if len(raw) > max_bytes:
        raise _Problem(f"the inline data is {len(raw)} bytes, over the {size_limit(max_bytes)} limit")
    media_type = explicit or sniff_media_type(raw) or _default_media_type(kind)
    return AttachmentData(type=kind, media_type=media_type, data=text)


def _data_url(source: str) -> tuple[str, tuple[str, bytes]]:
    match = _DATA_URL.fullmatch(source)
    if match is None or ";base64" not in match.group(2).lower():
        raise _Problem("only base64 data: URLs are supported (data:<media type>;base64,<data>)")
    text = urllib.parse.unquote(match.group(3)).replace("\r", "").replace("\n", "")
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise _Problem("the data: URL does not hold valid base64") from None
    return match.group(1).strip().lower(), (text, raw)


async def _pass_url(attachment: Attachment, url: str, options: _Options) -> AttachmentData:
    if attachment.type != "image":
        raise _Problem(
            f"fetch: provider passes the URL on and works for images only; "
            f"a {attachment.type} attachment needs fetch: local"
        )
    await anyio.to_thread.run_sync(options.sandbox.validate_attachment_url, url)
    media_type = (attachment.media_type or "").strip() or guess_media_type(_url_path(url), "image")
    return AttachmentData(type="image", media_type=media_type, url=url)


async def _download_attachment(attachment: Attachment, url: str, options: _Options) -> AttachmentData:
    # Each hop is checked like the first: allow_network, allowed_domains, internal addresses.
    try:
        result = await fetch(
            url,
            check=options.sandbox.validate_attachment_url,
            max_bytes=options.max_bytes,
            timeout=options.timeout,
            max_redirects=MAX_REDIRECTS,
            headers=_REQUEST_HEADERS,
            client_factory=options.client_factory,
        )
    except FetchError as exc:
        raise _Problem(str(exc)) from None
    media_type = (
        (attachment.media_type or "").strip()
        or _informative(result.content_type)
        or _media_type_from_name(_url_path(result.url))
        or _media_type_from_name(_url_path(url))
        or sniff_media_type(result.body)
        or _default_media_type(attachment.type)
    )
    encoded = base64.b64encode(result.body).decode("ascii")
    return AttachmentData(type=attachment.type, media_type=media_type, data=encoded)


async def _read_attachment_file(attachment: Attachment, source: str, options: _Options) -> AttachmentData:
    text = os.path.expanduser(source) if source.startswith("~") else source
    path = options.sandbox.validate_path(text, tool_name="attachment")
    raw = await anyio.to_thread.run_sync(_read_file, path, options.max_bytes, source)
    explicit = (attachment.media_type or "").strip()
    media_type = explicit or guess_media_type(str(path), attachment.type, raw)
    return AttachmentData(
        type=attachment.type, media_type=media_type, data=base64.b64encode(raw).decode("ascii")
    )


# ------------------------------------------------------------------------------------------ files


def _read_file(path: Path, max_bytes: int, source: str) -> bytes:
    """Read a regular file of at most ``max_bytes`` (runs in a worker thread)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise _Problem(f"no such file: {path}{_not_base64_hint(source)}") from None
    except IsADirectoryError:
        raise _Problem(f"{path} is a directory, not a file") from None
    except OSError as exc:
        raise _Problem(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        _check_regular_file(os.fstat(fd), path, max_bytes)
    except BaseException:
        os.close(fd)
        raise
    try:
        with os.fdopen(fd, "rb") as handle:  # closes fd from here on
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise _Problem(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise _Problem(f"{path} is over the {size_limit(max_bytes)} limit")
    return data


def _check_regular_file(info: os.stat_result, path: Path, max_bytes: int) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise _Problem(f"{path} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise _Problem(f"{path} is not a regular file")
    if info.st_size > max_bytes:
        raise _Problem(f"{path} is {info.st_size} bytes, over the {size_limit(max_bytes)} limit")


def _not_base64_hint(source: str) -> str:
    if len(source) > INLINE_MIN_LENGTH and "/" not in source and "." not in source:
        return " (the source is not valid base64 either)"
    return ""


# ------------------------------------------------------------------------------------ media types


def _media_type_from_name(name: str) -> str | None:
    extension = os.path.splitext(name)[1].lower()
    if extension in EXTENSION_MEDIA_TYPES:
        return EXTENSION_MEDIA_TYPES[extension]
    if not extension:
        return None
    guessed, _encoding = mimetypes.guess_type("file" + extension, strict=False)
    return guessed


def _default_media_type(attachment_type: str) -> str:
    return DEFAULT_MEDIA_TYPES.get(attachment_type, "application/octet-stream")


def _informative(content_type: str) -> str | None:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return None if media_type in _UNINFORMATIVE_TYPES else media_type


def _url_path(url: str) -> str:
    try:
        return urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    except ValueError:
        return ""


# ----------------------------------------------------------------------------------------- labels


def _redacted_url(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url.split("?", 1)[0]
    netloc = parts.netloc.rpartition("@")[2]
    query = "?…" if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")) + query


def _without_source(reason: str, source: str, label: str) -> str:
    """Replace the source in a reason by its description (a long path, a URL's query, …)."""
    return reason if label == source else reason.replace(source, label)


def _shorten(text: str) -> str:
    return text if len(text) <= _LABEL_LIMIT else text[: _LABEL_LIMIT - 1] + "…"
