"""A TCP proxy that holds every byte for a fixed time in each direction, as a network between two zones would:
the changes bench reads its hosts and clusters through it, so that a source's time is its round trips, as on a
real network, and not only this machine's CPU.

    python -m bench.latency_proxy DELAY_MS HOST:PORT [HOST:PORT ...]

prints `listening PORT` for each target (in their order), on 127.0.0.1, and serves until its stdin closes. It runs
in its own process, so its work is not the measured event loop's. Loopback only: every target must be on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy reader to writer, each chunk `delay` seconds after it arrived (order kept)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def receive() -> None:
        while data := await reader.read(65536):
            queue.put_nowait((loop.time() + delay, data))
        queue.put_nowait((loop.time() + delay, b""))

    receiving = asyncio.create_task(receive())
    try:
        while True:
            due, data = await queue.get()
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        return
    finally:
        receiving.cancel()


async def _serve(target: tuple[str, int], delay: float) -> asyncio.Server:
    async def proxy(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        await asyncio.sleep(delay * 2)  # the connection's own handshake crosses the network once each way
        await asyncio.gather(_pipe(client_r, upstream_w, delay), _pipe(upstream_r, client_w, delay))
        for w in (client_w, upstream_w):
            with contextlib.suppress(OSError):
                w.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        # A connection still open when the proxy exits is cancelled. Python 3.11's start_server then calls
        # exception() on the cancelled task and prints a traceback per connection (3.12 checks cancelled()).
        with contextlib.suppress(asyncio.CancelledError):
            await proxy(client_r, client_w)

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def main(delay_ms: float, targets: list[tuple[str, int]]) -> None:
    servers = [await _serve(t, delay_ms / 1000) for t in targets]
    for s in servers:
        print(f"listening {s.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.to_thread(sys.stdin.read)  # until the bench closes our stdin
    for s in servers:
        s.close()


def _target(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if host not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"latency_proxy: loopback targets only, not {text!r}")
    return host, int(port)


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]), [_target(t) for t in sys.argv[2:]]))
