#!/usr/bin/env python3
"""An MCP server over stdio that answers initialize with the contract's own example result,
then answers every other request with an id it never received: a misdirected reply, for the
derived conformance suite's evidence test. Usage: mcp_misdirect.py CONTRACT.json"""
import json
import sys

from stdio_requests import requests, send


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        contract = json.load(f)
    result = next(
        e["message"]
        for e in contract["methods"]["initialize"]["examples"]
        if e["part"] == "result"
    )
    for msg in requests():
        if msg["method"] == "initialize":
            send(dict(result, id=msg["id"]))
        else:
            send({"jsonrpc": "2.0", "id": f"never-{msg['id']}", "result": {}})


if __name__ == "__main__":
    main()
