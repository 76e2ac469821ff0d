"""A small MCP server built with the MCP Python SDK's FastMCP, for schema/contracts/mcp.json.

Tools, a static resource, a resource template, a prompt, completions and logging (the
logging capability is declared by registering a logging/setLevel handler, so the
server's notifications/message are legitimate). Some tools call back into the client:
progress, log messages, roots/list, sampling/createMessage and elicitation/create.

With `--no-completions` the server registers no completion handler, so it does not
declare the `completions` capability: a client's completion/complete is then a method
needing a capability nobody declared, which the proxy flags.
"""

import sys

import mcp.types as types
from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

mcp = FastMCP("contract-mcp-example", instructions="A test server for the mcp.json contract.")


class Sum(BaseModel):
    total: int


@mcp.tool(title="Add two numbers")
def add(a: int, b: int) -> Sum:
    """Add two integers (structured output)."""
    return Sum(total=a + b)


@mcp.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@mcp.tool()
def fail(reason: str) -> str:
    """Always fails: the error travels in the result with isError true."""
    raise ValueError(reason)


@mcp.tool()
async def slow_count(n: int, ctx: Context) -> str:
    """Count to n, reporting progress and logging each step."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
        await ctx.info(f"counted {i}")
    return f"counted to {n}"


@mcp.tool()
async def ask_client(question: str, ctx: Context) -> str:
    """Ask the client for its roots, a sampled answer and a user's name."""
    roots = await ctx.session.list_roots()
    sampled = await ctx.session.create_message(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=question))],
        max_tokens=50,
        system_prompt="Answer briefly.",
    )

    class Name(BaseModel):
        name: str

    elicited = await ctx.elicit("What is your name?", Name)
    name = elicited.data.name if elicited.action == "accept" else "?"
    text = sampled.content.text if isinstance(sampled.content, types.TextContent) else str(sampled.content)
    return f"roots={[str(r.uri) for r in roots.roots]} answer={text} name={name}"


@mcp.resource("resource://greeting", title="Greeting", mime_type="text/plain")
def greeting() -> str:
    """A static greeting."""
    return "Hello from mcpcheck"


@mcp.resource("greet://{name}")
def greet(name: str) -> str:
    """A templated greeting."""
    return f"Hello, {name}!"


@mcp.prompt(title="Code review")
def review(code: str, language: str = "python") -> str:
    """Ask for a review of some code."""
    return f"Please review this {language} code:\n{code}"


async def complete(ref, argument, context):
    if argument.name == "language":
        values = [v for v in ["python", "pytorch", "rust", "ruby"] if v.startswith(argument.value)]
        return types.Completion(values=values, total=len(values), hasMore=False)
    return None


if "--no-completions" not in sys.argv:
    mcp.completion()(complete)


@mcp._mcp_server.set_logging_level()
async def set_level(level: types.LoggingLevel) -> None:
    return None


if __name__ == "__main__":
    mcp.run("stdio")
