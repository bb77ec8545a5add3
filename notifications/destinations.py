"""Where a webhook may send: only to the public internet, unless the operators allow a network.

A webhook's URL is resolved and refused when any address it resolves to is loopback, link-local (the cloud
metadata service at 169.254.169.254), private, multicast, reserved or otherwise not global
(``ipaddress``'s ``is_global``), unless the address is in ``LOOPX_WEBHOOK_ALLOW_NETS`` (CIDRs, for a team
that needs an internal receiver). The check runs when a webhook is saved and again at every delivery, since
a name may resolve elsewhere by then; the delivery then connects to the address it checked, never resolving
the name a second time, and sends the name in the Host header and the TLS server name.

A name that does not resolve when the webhook is saved is kept: the delivery checks it again and fails
typed while it still does not resolve.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from kernel.errors import ServiceError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

URL_REFUSED = "webhook_url_refused"
UNRESOLVED = "webhook_url_unresolved"


class DestinationRefused(ServiceError):
    """A webhook URL that may not be sent to; nothing was saved or sent."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(400, code, detail)


@dataclass(frozen=True)
class Destination:
    """A checked URL: where to connect (``addresses``, every one allowed) and what to name it."""

    scheme: str
    host: str
    port: int
    path: str
    addresses: tuple[IpAddress, ...]


def resolve_host(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to now (the system resolver). Tests replace this function: no test
    resolves a name through the network."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def allowed_networks() -> tuple[IpNetwork, ...]:
    """``LOOPX_WEBHOOK_ALLOW_NETS``: the networks a webhook may reach although they are not global."""
    raw = getattr(settings, "LOOPX_WEBHOOK_ALLOW_NETS", ()) or ()
    if isinstance(raw, str):
        raw = raw.split(",")
    return tuple(ipaddress.ip_network(str(n).strip(), strict=False) for n in raw if str(n).strip())


def _why_refused(address: IpAddress, allowed: Iterable[IpNetwork]) -> str | None:
    if any(address.version == net.version and address in net for net in allowed):
        return None
    if address.is_global:
        return None
    for kind in ("loopback", "link_local", "private", "multicast", "reserved", "unspecified"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return "not global"


def destination_check(url: str) -> Destination:
    """The URL's destination, every address it resolves to allowed; else DestinationRefused (400
    ``webhook_url_refused``, or ``webhook_url_unresolved`` for a name that resolves to nothing)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationRefused(URL_REFUSED, "the URL cannot be read") from None
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise DestinationRefused(URL_REFUSED, "a webhook's URL is http:// or https:// with a host")
    try:
        addresses: list[IpAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            found = resolve_host(host, port)
        except (OSError, UnicodeError):
            found = []
        addresses = []
        for text in found:
            try:
                addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
            except ValueError:
                continue
        if not addresses:
            raise DestinationRefused(UNRESOLVED, f"the host {host} does not resolve") from None
    allowed = allowed_networks()
    for address in addresses:
        why = _why_refused(address, allowed)
        if why is not None:
            raise DestinationRefused(
                URL_REFUSED,
                f"the host {host} resolves to {address} ({why}); a webhook reaches only public addresses "
                "unless LOOPX_WEBHOOK_ALLOW_NETS allows that network",
            )
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Destination(parts.scheme, host, port, path, tuple(dict.fromkeys(addresses)))


def destination_check_at_save(url: str) -> None:
    """The check when a webhook is saved: refused as at delivery, except that a name that resolves to
    nothing yet is kept (its delivery checks it again)."""
    try:
        destination_check(url)
    except DestinationRefused as err:
        if err.code != UNRESOLVED:
            raise
