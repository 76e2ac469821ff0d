#!/usr/bin/env python3
"""An MCP server over stdio that announces notifications/tools/list_changed before it
answers initialize (the lifecycle allows it only in `operating`, after the client's
notifications/initialized), then answers with the contract's own example result; every
other request gets its method's example result. For the derived suite's behaviour check.
Usage: mcp_eager.py CONTRACT.json"""
import json
import sys

from stdio_requests import requests, send


def results(contract: dict) -> dict:
    out = {}
    for name, method in contract["methods"].items():
        for e in method.get("examples", []):
            if e.get("part") == "result" and name not in out:
                out[name] = e["message"]
    return out


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        answers = results(json.load(f))
    for msg in requests():
        if msg["method"] == "initialize":
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        answer = answers.get(msg["method"], {"jsonrpc": "2.0", "result": {}})
        send(dict(answer, id=msg["id"]))


if __name__ == "__main__":
    main()
