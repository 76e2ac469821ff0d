"""WebSocket client for the proxy's ws tests (Python `websockets`).

Usage: ws_client.py URL MODE [--token T] [--protocol P]... [--ca PEMFILE]

Prints JSON lines to stdout; exits 0 when the mode ran to its end (the test
asserts on the lines, not on the exit code alone).
  {"event": "open", "subprotocol": ...}
  {"event": "refused", "status": N, "headers": {...}, "body": "..."}   handshake got HTTP N
MODE echo: sends a text, a binary with every byte value, a 1 MiB text and a
  non-ASCII text; prints {"event": "echo", "kind", "len", "same": bool} for
  each; then sends "close:4009:superseded" and prints
  {"event": "closed", "code": C, "reason": R} for the close it receives.
MODE closeby:CODE:REASON: closes with that code and reason, prints
  {"event": "closed", "code": C, "reason": R} for the close it receives back.
--ca: for wss://, trust this PEM certificate (the proxy's generated one).
MODE ping: sends a ping with payload "client-ping", waits at most 3 s for the
  pong, prints {"event": "pong", "ms": F}; then closes normally.
"""

import asyncio
import json
import ssl
import sys
import time

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus


def emit(**kv):
    print(json.dumps(kv), flush=True)


def parse(argv):
    url, mode = argv[0], argv[1]
    token, protocols, ca = None, [], None
    rest = argv[2:]
    while rest:
        flag, value, rest = rest[0], rest[1], rest[2:]
        if flag == "--token":
            token = value
        elif flag == "--protocol":
            protocols.append(value)
        elif flag == "--ca":
            ca = value
        else:
            raise SystemExit(f"unknown flag {flag}")
    return url, mode, token, protocols, ca


async def echo(ws):
    payloads = [
        "hello through the proxy",
        bytes(range(256)) * 4,
        "x" * (1 << 20),
        "naïve ünïcode ✓ 🦀",
    ]
    for p in payloads:
        await ws.send(p)
        got = await asyncio.wait_for(ws.recv(), 5)
        emit(event="echo", kind="text" if isinstance(p, str) else "binary", len=len(got), same=got == p)
    await ws.send("close:4009:superseded")
    try:
        extra = await asyncio.wait_for(ws.recv(), 5)
        emit(event="unexpected", data=str(extra)[:100])
    except ConnectionClosed as e:
        rcvd = e.rcvd
        emit(event="closed", code=rcvd.code if rcvd else None, reason=rcvd.reason if rcvd else None)


async def ping(ws):
    start = time.monotonic()
    waiter = await ws.ping(b"client-ping")
    await asyncio.wait_for(waiter, 3)
    emit(event="pong", ms=(time.monotonic() - start) * 1000)
    await asyncio.wait_for(ws.close(), 5)
    emit(event="closed", code=ws.close_code, reason=ws.close_reason)


async def closeby(ws, code, reason):
    await asyncio.wait_for(ws.close(int(code), reason), 5)
    rcvd = ws.protocol.close_rcvd
    emit(event="closed", code=rcvd.code if rcvd else None, reason=rcvd.reason if rcvd else None)


async def main():
    url, mode, token, protocols, ca = parse(sys.argv[1:])
    ssl_ctx = None
    if ca:
        ssl_ctx = ssl.create_default_context(cafile=ca)
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        ws = await connect(
            url,
            additional_headers=headers,
            subprotocols=protocols or None,
            open_timeout=5,
            close_timeout=5,
            ping_interval=None,
            max_size=32 << 20,
            ssl=ssl_ctx,
        )
    except InvalidStatus as e:
        r = e.response
        emit(
            event="refused",
            status=r.status_code,
            headers={k: v for k, v in r.headers.raw_items()},
            body=r.body.decode("utf-8", "replace"),
        )
        return
    emit(event="open", subprotocol=ws.subprotocol)
    async with ws:
        if mode.startswith("closeby:"):
            _, code, reason = mode.split(":", 2)
            await closeby(ws, code, reason)
        else:
            await {"echo": echo, "ping": ping}[mode](ws)


if __name__ == "__main__":
    asyncio.run(main())
