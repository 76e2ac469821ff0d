"""A QUIC client that is closed on purpose, many times over (aioquic).

Usage: quic_close_storm.py HOST PORT ALPN CAFILE ROUNDS BYTES

Each round connects with ALPN (verifying the server against CAFILE), opens one
bidirectional stream, writes BYTES bytes of lines that are not JSON and ends
its side, reading at the same time until the server's end of stream. It prints
one JSON line per round:
  {"round": N, "lines": L, "end": "fin" | "reset" | "timeout", "close": C, "close_ms": M}
where L is how many complete lines came back, "end" how the stream ended, C
the error code of the server's CONNECTION_CLOSE (null if none came within
CLOSE_WAIT seconds of the stream's end) and M how long after that end it came. Rounds run AT_ONCE at a
time; every wait has a deadline.
"""

import asyncio
import json
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset

DEADLINE = 15.0
AT_ONCE = 25
# The proxy closes after its relay linger (up to 2 s reading what this client still
# sends, which Python encrypts at a few MB/s) and then waits up to 5 s for its last
# bytes to be acknowledged: a close later than that is lost, one sooner is not.
CLOSE_WAIT = 8.0


class Watching(QuicConnectionProtocol):
    """Records the stream resets and the connection close it sees."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reset = False
        self.closed_with = None
        self.closed_at = None

    def quic_event_received(self, event):
        if isinstance(event, StreamReset):
            self.reset = True
        elif isinstance(event, ConnectionTerminated):
            self.closed_with = event.error_code
            self.closed_at = asyncio.get_running_loop().time()
        super().quic_event_received(event)


async def one(host, port, config, size):
    async with connect(host, port, configuration=config, create_protocol=Watching) as client:
        reader, writer = await client.create_stream()
        writer.write(b"{nope\n" * (size // 6))
        writer.write_eof()
        got = await reader.read()
        end = "reset" if client.reset else "fin"
        ended = asyncio.get_running_loop().time()
        # The server closes the connection once its last bytes are acknowledged.
        try:
            await asyncio.wait_for(client.wait_closed(), CLOSE_WAIT)
        except asyncio.TimeoutError:
            pass
        after = None if client.closed_at is None else round((client.closed_at - ended) * 1000)
        return got.count(b"\n"), end, client.closed_with, after


async def main():
    host, port, alpn, cafile, rounds, size = sys.argv[1:7]
    config = QuicConfiguration(is_client=True, alpn_protocols=[alpn])
    config.load_verify_locations(cafile)

    async def round_(n):
        try:
            lines, end, close, after = await asyncio.wait_for(one(host, int(port), config, int(size)), DEADLINE)
        except asyncio.TimeoutError:
            lines, end, close, after = None, "timeout", None, None
        except ConnectionError as e:
            lines, end, close, after = None, f"error: {e}", None, None
        print(json.dumps({"round": n, "lines": lines, "end": end, "close": close, "close_ms": after}), flush=True)

    # A closing QUIC connection lingers in its draining period: rounds overlap, a
    # few at a time, so the run takes seconds rather than the sum of the drains.
    total = int(rounds)
    for start in range(0, total, AT_ONCE):
        await asyncio.gather(*(round_(n) for n in range(start, min(start + AT_ONCE, total))))


if __name__ == "__main__":
    asyncio.run(main())
