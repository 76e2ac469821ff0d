"""An MCP host built with the MCP Python SDK's client: the implementation under test when
the conformance suite plays the server.

Usage: mcp_host.py CMD [ARG...]

Launches CMD as its MCP server over stdio, as a host is configured to (the suite's tests
give it `socat STDIO UNIX-CONNECT:{control}`, so the server is the suite), initializes with
sampling, roots and elicitation callbacks, lists the tools if the server declared them,
then serves the server's
requests until the server goes away.
"""

import asyncio
import sys

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def sampling(context, params: types.CreateMessageRequestParams):
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="Paris."),
        model="fake-model-1", stopReason="endTurn",
    )


async def roots(context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///tmp", name="tmp")])


async def elicitation(context, params):
    return types.ElicitResult(action="accept", content={"name": "octocat"})


async def main() -> None:
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, sampling_callback=sampling,
                                 list_roots_callback=roots,
                                 elicitation_callback=elicitation) as s:
            init = await s.initialize()
            # A host calls only what the server declared (the SDK leaves that to it).
            if init.capabilities.tools is not None:
                await s.list_tools()
            # Serve the server's requests (the SDK answers them in the background) until
            # the server ends the stream; the suite ends this process after its last check.
            await asyncio.sleep(3600)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except BaseException:  # the server went away: the session is over
        sys.exit(0)
