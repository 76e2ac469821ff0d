"""MCP client over WebSocket (mcp SDK 1.30.0 `websocket_client`).

Usage: ws_mcp_client.py URL

Initializes, lists tools, calls "echo" with a non-ASCII text, and prints JSON lines:
  {"event": "initialized", "server": NAME, "protocolVersion": V}
  {"event": "tools", "names": [...]}
  {"event": "result", "text": T, "sent": T0, "isError": bool}
Everything runs under a 20 s deadline.
"""

import json
import sys
import warnings

import anyio
from mcp import ClientSession

warnings.filterwarnings("ignore", category=DeprecationWarning)
from mcp.client.websocket import websocket_client  # noqa: E402  (deprecated in 1.30, still shipped)

TEXT = "héllo through the proxy ✓"


def emit(**kv):
    print(json.dumps(kv), flush=True)


async def main(url):
    with anyio.fail_after(20):
        async with websocket_client(url) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                emit(event="initialized", server=init.serverInfo.name, protocolVersion=init.protocolVersion)
                tools = await session.list_tools()
                emit(event="tools", names=[t.name for t in tools.tools])
                res = await session.call_tool("echo", {"text": TEXT})
                text = "".join(c.text for c in res.content if c.type == "text")
                emit(event="result", text=text, sent=TEXT, isError=res.isError)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
