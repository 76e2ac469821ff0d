"""aioquic client peer for the QUIC endpoint tests (third-party QUIC stack).

Usage: quic_client.py HOST PORT ALPN CAFILE JSON

Connects with ALPN, verifying the server against CAFILE (for a self-signed
server certificate: that certificate itself) and the host name or IP, opens one
bidirectional stream, sends JSON as one frame (4-byte big-endian length, then
the UTF-8 bytes), half-closes, reads until the server's end of stream, and
prints what came back as hex on stdout. Exits non-zero with the reason on
stderr on any failure; every wait has a deadline.
"""

import asyncio
import sys

from aioquic.asyncio.client import connect
from aioquic.quic.configuration import QuicConfiguration

DEADLINE = 10.0


async def main() -> int:
    host, port, alpn, cafile, text = sys.argv[1:6]
    config = QuicConfiguration(is_client=True, alpn_protocols=[alpn])
    config.load_verify_locations(cafile)
    payload = text.encode()
    frame = len(payload).to_bytes(4, "big") + payload
    async with connect(host, int(port), configuration=config) as client:
        reader, writer = await client.create_stream()
        writer.write(frame)
        writer.write_eof()
        reply = await reader.read()
    sys.stdout.write(reply.hex() + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(asyncio.wait_for(main(), DEADLINE)))
    except Exception as e:  # report any failure to the test, which asserts on it
        sys.stderr.write(f"quic_client: {type(e).__name__}: {e}\n")
        sys.exit(1)
