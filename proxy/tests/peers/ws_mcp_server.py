"""MCP server over WebSocket (mcp SDK 1.30.0 `websocket_server`, Starlette + uvicorn).

Usage: ws_mcp_server.py PORT        (0: the OS picks; the port is printed)

Serves ws://127.0.0.1:PORT/mcp with subprotocol "mcp". One tool, "echo"
({"text": str} -> the same text). Prints JSON lines to stdout:
  {"event": "listening", "port": N}
  {"event": "call", "tool": NAME, "arguments": {...}}
"""

import asyncio
import json
import socket
import sys
import warnings

import mcp.types as types
import uvicorn
from mcp.server.lowlevel import Server
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

warnings.filterwarnings("ignore", category=DeprecationWarning)
from mcp.server.websocket import websocket_server  # noqa: E402  (deprecated in 1.30, still shipped)


def emit(**kv):
    print(json.dumps(kv), flush=True)


server = Server("ws-mcp-peer")


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return [
        types.Tool(
            name="echo",
            description="Returns its text argument.",
            inputSchema={
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        )
    ]


@server.call_tool()
async def call_tool(name: str, arguments: dict) -> list[types.TextContent]:
    emit(event="call", tool=name, arguments=arguments)
    if name != "echo":
        raise ValueError(f"unknown tool {name}")
    return [types.TextContent(type="text", text=arguments["text"])]


async def endpoint(websocket):
    async with websocket_server(websocket.scope, websocket.receive, websocket.send) as (read, write):
        await server.run(read, write, server.create_initialization_options())


app = Starlette(routes=[WebSocketRoute("/mcp", endpoint)])


async def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, log_level="warning", ws="websockets-sansio", ws_ping_interval=None)
    emit(event="listening", port=sock.getsockname()[1])
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
