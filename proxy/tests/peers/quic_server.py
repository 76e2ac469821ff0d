"""aioquic server peer for the QUIC endpoint tests (third-party QUIC stack).

Usage: quic_server.py CERT KEY ALPN

Listens on 127.0.0.1, port chosen by the OS, and prints `PORT <n>` on stdout
once ready. On every bidirectional stream it reads until the client's end of
stream, expects exactly one frame (4-byte big-endian length, then a JSON
value), and answers one frame `{"echo": VALUE}` followed by end of stream. A
malformed frame is answered with `{"error": REASON}` instead, so the test sees
what the peer understood. Runs until killed (or for at most 60 s).
"""

import asyncio
import json
import sys

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamDataReceived

LIFETIME = 60.0


def answer(data: bytes) -> bytes:
    if len(data) < 4:
        body = {"error": f"short frame ({len(data)} bytes)"}
    else:
        n = int.from_bytes(data[:4], "big")
        if n != len(data) - 4:
            body = {"error": f"length {n} but {len(data) - 4} bytes follow"}
        else:
            try:
                body = {"echo": json.loads(data[4:].decode())}
            except ValueError as e:
                body = {"error": f"bad JSON: {e}"}
    out = json.dumps(body, separators=(",", ":")).encode()
    return len(out).to_bytes(4, "big") + out


class Echo(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.buffers: dict[int, bytearray] = {}

    def quic_event_received(self, event) -> None:
        if isinstance(event, StreamDataReceived):
            buf = self.buffers.setdefault(event.stream_id, bytearray())
            buf += event.data
            if event.end_stream:
                reply = answer(bytes(self.buffers.pop(event.stream_id)))
                self._quic.send_stream_data(event.stream_id, reply, end_stream=True)
                self.transmit()


async def main() -> None:
    cert, key, alpn = sys.argv[1:4]
    config = QuicConfiguration(is_client=False, alpn_protocols=[alpn])
    config.load_cert_chain(cert, key)
    server = await serve("127.0.0.1", 0, configuration=config, create_protocol=Echo)
    port = server._transport.get_extra_info("sockname")[1]
    print(f"PORT {port}", flush=True)
    try:
        await asyncio.sleep(LIFETIME)
    finally:
        server.close()


if __name__ == "__main__":
    asyncio.run(main())
