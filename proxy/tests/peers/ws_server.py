"""Toolchannel-like WebSocket upstream for the proxy's ws tests (Python `websockets`).

Usage: ws_server.py [--silent]

Listens on 127.0.0.1, port chosen by the OS, and prints JSON lines to stdout:
  {"event": "listening", "port": N}
  {"event": "upgrade", "path": ..., "authorization": ..., "subprotocols": [...]}   (every request)
  {"event": "refused", "status": 401|426}
  {"event": "open", "subprotocol": ...}
  {"event": "message", "kind": "text"|"binary", "len": N}
  {"event": "closed", "code": C, "reason": R}

Like the toolchannel host: `Authorization: Bearer t0k` or 401; subprotocol
agentfy.worker.v1 or 426 listing it in Sec-WebSocket-Protocol. Echoes every
message; the text "close:CODE:REASON" makes it close with that code and reason.
--silent: never sends anything (for per-hop ping tests).
"""

import asyncio
import json
import sys

from websockets.asyncio.server import serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Response

PROTOCOL = "agentfy.worker.v1"
TOKEN = "Bearer t0k"
SILENT = "--silent" in sys.argv[1:]


def emit(**kv):
    print(json.dumps(kv), flush=True)


def offered(request):
    out = []
    for v in request.headers.get_all("Sec-WebSocket-Protocol"):
        out.extend(p.strip() for p in v.split(",") if p.strip())
    return out


def process_request(connection, request):
    protocols = offered(request)
    auth = request.headers.get("Authorization")
    emit(event="upgrade", path=request.path, authorization=auth, subprotocols=protocols)
    if auth != TOKEN:
        emit(event="refused", status=401)
        return Response(
            401,
            "Unauthorized",
            Headers([("WWW-Authenticate", "Bearer"), ("Content-Type", "text/plain")]),
            b"bad or missing token\n",
        )
    if PROTOCOL not in protocols:
        emit(event="refused", status=426)
        return Response(
            426,
            "Upgrade Required",
            Headers([("Sec-WebSocket-Protocol", PROTOCOL), ("Content-Type", "text/plain")]),
            b"unsupported subprotocol\n",
        )
    return None


async def handler(ws):
    emit(event="open", subprotocol=ws.subprotocol)
    try:
        async for msg in ws:
            kind = "text" if isinstance(msg, str) else "binary"
            emit(event="message", kind=kind, len=len(msg))
            if kind == "text" and msg.startswith("close:"):
                _, code, reason = msg.split(":", 2)
                await ws.close(int(code), reason)
                break
            if not SILENT:
                await ws.send(msg)
    except ConnectionClosed:
        pass
    rcvd = ws.close_code
    emit(event="closed", code=rcvd, reason=ws.close_reason)


async def main():
    async with serve(
        handler,
        "127.0.0.1",
        0,
        subprotocols=[PROTOCOL],
        process_request=process_request,
        ping_interval=None,
        max_size=32 << 20,
    ) as server:
        port = server.sockets[0].getsockname()[1]
        emit(event="listening", port=port)
        await asyncio.Future()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
