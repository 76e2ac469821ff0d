"""An MCP client built with the MCP Python SDK, talking to server.py through contract-proxy.

Usage: client.py SCENARIO PROXY CONTRACT MODE LOG [SERVER_ARG...]

The client launches the proxy as its MCP server over stdio (as an MCP host is
configured to); the proxy launches server.py (`--upstream exec:`) and writes one JSON
event per frame to LOG. The last line on stdout is a JSON summary for the test.

Scenarios:
  session  a whole session touching 23 of the contract's 25 methods, in order
  burst    eight tools/call at once: the contract's toolsCallRate lets a burst through
  early    tools/call before initialize, then initialize twice
  complete completion/complete, for a server started with --no-completions
  missing  resources/read of a resource the server does not have (FastMCP answers code 0)
"""

import asyncio
import json
import os
import sys

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO, PROXY, CONTRACT, MODE, LOG = sys.argv[1:6]
SERVER = " ".join([sys.executable, os.path.join(HERE, "server.py"), *sys.argv[6:]])

# PCAP (environment): also write the session as pcapng there (`run --pcap`).
PCAP = ["--pcap", os.environ["PCAP"]] if os.environ.get("PCAP") else []
PARAMS = StdioServerParameters(
    command=PROXY,
    args=["run", "--contract", CONTRACT, "--listen", "stdio", "--upstream", f"exec:{SERVER}",
          "--log", "json", "--mode", MODE, *PCAP],
)


async def sampling(context, params: types.CreateMessageRequestParams):
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="Paris."),
        model="fake-model-1", stopReason="endTurn",
    )


async def roots(context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///tmp", name="tmp")])


async def elicitation(context, params):
    return types.ElicitResult(action="accept", content={"name": "octocat"})


def text_of(r: types.CallToolResult) -> object:
    return r.content[0].text if r.content and isinstance(r.content[0], types.TextContent) else None


async def code_of(call) -> object:
    """The JSON-RPC error code a call ends with, or its result."""
    try:
        return {"result": await call}
    except McpError as e:
        return {"error": e.error.code}


async def session(s: ClientSession) -> dict:
    init = await s.initialize()
    await s.send_ping()
    await s.set_logging_level("info")
    tools = [t.name for t in (await s.list_tools()).tools]
    calls = [("add", {"a": 2, "b": 3}), ("echo", {"text": "hi"}), ("fail", {"reason": "on purpose"}),
             ("slow_count", {"n": 3}), ("ask_client", {"question": "Capital of France?"})]
    results = [text_of(await s.call_tool(n, a)) for n, a in calls]
    await s.list_resources()
    await s.list_resource_templates()
    await s.read_resource(AnyUrl("resource://greeting"))
    await s.read_resource(AnyUrl("greet://world"))
    await s.list_prompts()
    await s.get_prompt("review", {"code": "print(1)", "language": "python"})
    comp = await s.complete(types.PromptReference(type="ref/prompt", name="review"),
                            {"name": "language", "value": "py"})
    await s.send_roots_list_changed()
    await s.send_ping()
    return {"server": init.serverInfo.name, "tools": tools, "results": results,
            "completion": comp.completion.values}


async def burst(s: ClientSession) -> dict:
    await s.initialize()
    outs = await asyncio.gather(*(code_of(s.call_tool("echo", {"text": str(i)})) for i in range(8)))
    return {
        "echoed": sorted(text_of(o["result"]) for o in outs if "result" in o),
        "errors": [o["error"] for o in outs if "error" in o],
    }


async def early(s: ClientSession) -> dict:
    before = await code_of(s.call_tool("echo", {"text": "too soon"}))
    first = await code_of(s.initialize())
    second = await code_of(s.initialize())
    return {"before": before.get("error"), "first": "result" in first, "second": second.get("error")}


async def complete(s: ClientSession) -> dict:
    init = await s.initialize()
    out = await code_of(s.complete(types.PromptReference(type="ref/prompt", name="review"),
                                   {"name": "language", "value": "py"}))
    return {"declared": sorted(init.capabilities.model_dump(exclude_none=True)), "completion": out.get("error")}


async def missing(s: ClientSession) -> dict:
    await s.initialize()
    out = await code_of(s.read_resource(AnyUrl("resource://missing")))
    return {"error": out.get("error")}


async def main() -> None:
    run = {"session": session, "burst": burst, "early": early, "complete": complete,
           "missing": missing}[SCENARIO]
    with open(LOG, "w") as errlog:
        async with stdio_client(PARAMS, errlog=errlog) as (read, write):
            async with ClientSession(read, write, sampling_callback=sampling, list_roots_callback=roots,
                                     elicitation_callback=elicitation) as s:
                summary = await asyncio.wait_for(run(s), timeout=60)
    print(json.dumps(summary, default=str))


asyncio.run(main())
