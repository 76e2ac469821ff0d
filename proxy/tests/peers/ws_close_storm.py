"""A worker that is closed on purpose, many times over (Python `websockets`).

Usage: ws_close_storm.py URL PROTOCOL TOKEN ROUNDS FRAMES

Each round dials URL with the subprotocol and `Authorization: Bearer TOKEN`,
writes FRAMES text messages that are not JSON in one burst, without waiting
for any answer (so some are still unread when the proxy closes), then reads
until the connection ends. It prints one JSON line per round:
  {"round": N, "code": C, "replies": R}
where C is the close code received (null when the connection ended without a
close frame) and R how many messages arrived before it. Every wait has a
deadline; a round that runs out of time prints "code": "timeout".
"""

import asyncio
import json
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

DEADLINE = 10.0


async def one(url, protocol, token, frames):
    ws = await connect(
        url,
        additional_headers={"Authorization": f"Bearer {token}"},
        subprotocols=[protocol],
        open_timeout=DEADLINE,
        close_timeout=DEADLINE,
        ping_interval=None,
    )
    replies = 0
    try:
        for _ in range(frames):
            await ws.send("{nope")
        while True:
            await ws.recv()
            replies += 1
    except ConnectionClosed as e:
        return (e.rcvd.code if e.rcvd else None), replies


async def main():
    url, protocol, token, rounds, frames = sys.argv[1:6]
    for n in range(int(rounds)):
        try:
            code, replies = await asyncio.wait_for(one(url, protocol, token, int(frames)), DEADLINE)
        except asyncio.TimeoutError:
            code, replies = "timeout", None
        print(json.dumps({"round": n, "code": code, "replies": replies}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
