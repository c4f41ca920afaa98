"""A TCP proxy on 127.0.0.1 that delays every chunk by a fixed time in each direction: the local
S3 server as if it were that far away (a round trip of twice the delay). For
benchmarks/bench_remote.py: `python latency_proxy.py LISTEN_PORT TARGET_PORT ONE_WAY_MS` prints
"ready" once it listens, and runs until killed."""

from __future__ import annotations

import asyncio
import sys


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy `reader` to `writer`, each chunk `delay` seconds after it arrived (in order: chunks
    that arrive together leave together, so a stream keeps its throughput)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            arrived, data = await queue.get()
            if not data:
                break
            wait = arrived + delay - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time(), data))
    except ConnectionError:
        pass
    queue.put_nowait((0.0, b""))
    await sender


async def _main(listen: int, target: int, delay: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            _pump(reader, up_writer, delay), _pump(up_reader, writer, delay), return_exceptions=True
        )

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000))
