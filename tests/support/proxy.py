"""HTTP proxies on 127.0.0.1 for the tests that prove a client honours HTTP(S)_PROXY: a CONNECT tunnel (what a
client asks of a proxy for an https:// URL) and a forwarding proxy (for an http:// URL: the request line names the
whole URL). Each yields its URL and the list of targets it carried."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    while data := await r.read(65536):
        w.write(data)
        await w.drain()
    w.close()


async def _both_ways(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up_r: asyncio.StreamReader, up_w: asyncio.StreamWriter
) -> None:
    await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer), return_exceptions=True)


@contextlib.asynccontextmanager
async def _serving(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


@contextlib.asynccontextmanager
async def connect_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A CONNECT proxy: the request line names the target (`host:port`), then bytes go both ways."""
    tunnels: list[str] = []

    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        target = head.split()[1]
        tunnels.append(target)
        host, port = target.rsplit(":", 1)
        up_r, up_w = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _both_ways(reader, writer, up_r, up_w)

    async with _serving(connect) as url:
        yield url, tunnels


@contextlib.asynccontextmanager
async def forwarding_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A forwarding proxy: the request line names the whole URL; it goes on to the target in origin form."""
    forwarded: list[str] = []

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        request_line, rest = head.split("\r\n", 1)
        method, url, version = request_line.split()
        forwarded.append(url)
        authority, _, path = url.removeprefix("http://").partition("/")
        host, port = authority.rsplit(":", 1)
        up_r, up_w = await asyncio.open_connection(host, int(port))
        up_w.write(f"{method} /{path} {version}\r\n{rest}".encode("latin-1"))
        await _both_ways(reader, writer, up_r, up_w)

    async with _serving(forward) as url:
        yield url, forwarded
