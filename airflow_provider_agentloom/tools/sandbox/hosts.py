"""Host rules of the sandbox: URL hosts in any spelling, internal addresses, DNS resolution.

Private to ``tools/``: code elsewhere uses ``tools.net``, which re-exports what it needs. Standard
library only, so that the sandbox (and registering the built-ins) loads no HTTP client.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from airflow_provider_agentloom.exceptions import AgentLoomError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Resolve ``(host, port)`` to IP address strings; raises ``OSError`` when the host does not resolve.
Resolver = Callable[[str, int], Sequence[str]]

DEFAULT_PORTS = {"http": 80, "https": 443}
#: The only schemes any request can use, whatever ``allowed_schemes`` lists.
WEB_SCHEMES = ("http", "https")

_SHARED_ADDRESS_SPACE = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
_LOCALHOST_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


class HostError(AgentLoomError, ValueError):
    """Raised when a URL or its host cannot be read."""


@dataclass(frozen=True)
class NetworkTarget:
    """What a connection may use after the sandbox checked a URL.

    :param url: the URL as given.
    :param scheme: the URL's scheme, lower-cased.
    :param host: the host, normalised (lower case, no brackets, no trailing dot, IDNA, percent-decoded).
    :param port: the port the connection uses.
    :param addresses: the IP addresses that were checked; connect to these only. Empty when nothing
        was checked (sandbox disabled): the connection then resolves the name itself.
    """

    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...] = ()

    @property
    def pinned(self) -> bool:
        """Return True when the connection must go to ``addresses`` and nowhere else."""
        return bool(self.addresses)


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve ``host`` with the operating system's resolver; every distinct address, in order."""
    found: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = str(sockaddr[0])
        if address not in found:
            found.append(address)
    return found


def scheme_of(url: str) -> str:
    """Return the lower-cased scheme of ``url`` (empty when it has none); raise ``HostError``."""
    try:
        return urllib.parse.urlsplit(url).scheme.lower()
    except ValueError as exc:
        raise HostError(f"invalid URL {url!r}: {exc}") from exc


def split_url(url: str) -> tuple[str, str, int]:
    """Return ``(scheme, normalised host, port)`` of ``url``; raise ``HostError`` when it has none."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HostError(f"invalid URL {url!r}: {exc}") from exc
    scheme = parts.scheme.lower()
    if not parts.hostname:
        raise HostError(f"URL {url!r} has no host")
    host = normalize_host(parts.hostname)
    if port is None:
        port = DEFAULT_PORTS.get(scheme, 0)
    return scheme, host, port


def normalize_host(raw: str) -> str:
    """Return the one spelling of a host used for every comparison.

    Percent-encoding is decoded, brackets and trailing dots are dropped, letters are lower-cased and
    a non-ASCII name is IDNA-encoded. Raise ``HostError`` for anything that is not a host name or an
    IP address.
    """
    host = urllib.parse.unquote(raw)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.rstrip(".").lower()
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError as exc:
            raise HostError(f"invalid host name {raw!r}") from exc
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise HostError(f"invalid host {raw!r}") from exc
        return host
    if not _HOST_NAME.fullmatch(host):
        raise HostError(f"invalid host {raw!r}")
    return host


def parse_ip(host: str) -> IPAddress | None:
    """Return the address a normalised host spells, in any form ``inet_aton`` takes, or None for a name.

    Besides dotted quads this reads ``127.1``, ``0x7f000001``, ``2130706433``, octal ``0177.0.0.1``
    and IPv6 literals (with a zone, IPv4-mapped, …).
    """
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    return _parse_ipv4_loose(host)


def _parse_ipv4_loose(host: str) -> ipaddress.IPv4Address | None:
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        value = _parse_ipv4_part(part)
        if value is None:
            return None
        values.append(value)
    *leading, last = values
    if any(v > 0xFF for v in leading) or last >= 256 ** (5 - len(values)):
        return None
    number = 0
    for v in leading:
        number = number * 256 + v
    number = number * 256 ** (5 - len(values)) + last
    return ipaddress.IPv4Address(number)


def _parse_ipv4_part(part: str) -> int | None:
    if part[:2].lower() == "0x":
        digits, base = part[2:], 16
        if not digits:
            return 0
    elif len(part) > 1 and part.startswith("0"):
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    try:
        return int(digits, base) if digits.isascii() and digits.isalnum() else None
    except ValueError:
        return None


def is_localhost_name(host: str) -> bool:
    """Return True for ``localhost`` and its relatives, which name this machine whatever DNS says."""
    return host in _LOCALHOST_NAMES or host.endswith(".localhost")


def is_internal(address: IPAddress) -> bool:
    """Return True for an address on this machine or a private network.

    Loopback, private, link-local (with 169.254.169.254), shared address space (100.64/10),
    unspecified, reserved, multicast, IPv6 ULA and site-local, and IPv6 forms that carry one of
    those IPv4 addresses (mapped, compatible, 6to4, NAT64).
    """
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None and is_internal(embedded):
            return True
        if address.is_site_local:
            return True
    elif address in _SHARED_ADDRESS_SPACE:
        return True
    return (
        not address.is_global
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_reserved
        or address.is_multicast
    )


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or address in _IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def display_url(url: str) -> str:
    """Return ``url`` without user info, query or fragment, which may carry secrets (for logs and errors)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def shown_url(url: str) -> str:
    """:func:`display_url`, also for a URL it cannot read (then cut at ``?`` and after ``@``)."""
    try:
        return display_url(url)
    except ValueError:
        return url.split("?", 1)[0].rpartition("@")[2]
