"""Why a service can't be reached, in one line: `cannot connect to slack.com:443 (connection refused)`.

`opsloop check` and `opsloop run` say this instead of a traceback when Slack or Anthropic is behind a
firewall, a dead proxy, a broken resolver or a TLS interceptor. Works on what aiohttp (slack_sdk) and httpx
(anthropic) raise, by walking the exception's causes to the OS-level reason.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

import aiohttp


def endpoint(url: str) -> str:
    """host:port of a URL (the default port of its scheme when it names none)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    host = parts.hostname or url
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_unreachable(error: BaseException) -> bool:
    """Whether `error` means "the service could not be reached" (not "it answered with an error")."""
    return any(
        isinstance(e, _UNREACHABLE)
        or _named(
            e, "ConnectError", "ConnectTimeout", "ProxyError", "APIConnectionError", "APITimeoutError", "ReadTimeout"
        )
        for e in _chain(error)
    )


def unreachable(error: BaseException, url: str, *, proxy: str | None = None, timeout_s: float | None = None) -> str:
    """`cannot connect to HOST:PORT (why)`, naming the proxy instead when the way to it is what failed."""
    target = endpoint(url)
    why = reason(error, timeout_s=timeout_s)
    for e in _chain(error):
        if isinstance(e, aiohttp.ClientProxyConnectionError) or _named(e, "ProxyError"):
            via = endpoint(proxy) if proxy else "from the environment"
            return f"cannot connect to {target} through proxy {via} ({why})"
    if proxy and not any(isinstance(e, ssl.SSLError) for e in _chain(error)):
        return f"cannot connect to {target} through proxy {endpoint(proxy)} ({why})"
    return f"cannot connect to {target} ({why})"


def reason(error: BaseException, *, timeout_s: float | None = None) -> str:
    """The OS- or TLS-level reason in a few words: connection refused, DNS lookup failed, TLS …, timed out."""
    chain = list(_chain(error))
    for link in chain:
        e = link.certificate_error if isinstance(link, aiohttp.ClientConnectorCertificateError) else link
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"TLS certificate not trusted: {getattr(e, 'verify_message', None) or 'certificate verify failed'}"
    for e in chain:
        if isinstance(e, ssl.SSLError):
            return f"TLS handshake failed: {e.reason or e.strerror or e}"
        if "CERTIFICATE_VERIFY_FAILED" in str(e):
            return "TLS certificate not trusted: certificate verify failed"
        if "SSL" in type(e).__name__ or "[SSL" in str(e):
            return f"TLS handshake failed: {_first_line(e)}"
    for e in chain:
        if isinstance(e, socket.gaierror | aiohttp.ClientConnectorDNSError):
            return "DNS lookup failed: name not known" if _gai_not_known(e) else f"DNS lookup failed: {_strerror(e)}"
        if "Name or service not known" in str(e) or "nodename nor servname" in str(e):
            return "DNS lookup failed: name not known"
        if "Temporary failure in name resolution" in str(e):
            return "DNS lookup failed: temporary failure in name resolution"
    for e in chain:
        if isinstance(e, ConnectionRefusedError) or "Connection refused" in str(e):
            return "connection refused"
        if isinstance(e, ConnectionResetError):
            return "connection reset"
    for e in chain:
        if isinstance(e, TimeoutError | asyncio.TimeoutError | aiohttp.ServerTimeoutError) or _named(
            e, "ConnectTimeout", "ReadTimeout", "APITimeoutError", "PoolTimeout"
        ):
            return f"timed out after {timeout_s:g}s" if timeout_s else "timed out"
    for e in chain:
        if isinstance(e, aiohttp.ServerDisconnectedError):
            return "the server closed the connection"
        if isinstance(e, OSError) and e.errno is not None:
            return _strerror(e)
    return _first_line(chain[-1]) if chain else type(error).__name__


# asyncio.TimeoutError is TimeoutError
_UNREACHABLE: tuple[type[BaseException], ...] = (aiohttp.ClientConnectionError, aiohttp.ServerTimeoutError)
_UNREACHABLE += (TimeoutError, ConnectionError, socket.gaierror, ssl.SSLError)


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        if isinstance(e, aiohttp.ClientConnectorError):
            yield e.os_error
        e = e.__cause__ or e.__context__


def _named(e: BaseException, *names: str) -> bool:
    return any(cls.__name__ in names for cls in type(e).__mro__)


def _gai_not_known(e: BaseException) -> bool:
    errno = getattr(e, "errno", None)
    if isinstance(e, aiohttp.ClientConnectorError):
        errno = e.os_error.errno
    return errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))


def _strerror(e: BaseException) -> str:
    if isinstance(e, aiohttp.ClientConnectorError):
        e = e.os_error
    text = getattr(e, "strerror", None) or str(e)
    return text[:1].lower() + text[1:] if text else type(e).__name__


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__
