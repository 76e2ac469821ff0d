"""Test-only stand-in worker for toolchannel-host (issue 8).

Not a reference peer (that is examples/toolchannel/worker.py): a scripted
client played with `websockets`, whose every frame is checked with the
generated SDK (`contract_sdk.toolchannel`), to exercise the host's side of the
contract. Scenarios (``--scenario``):

- ``normal``: full session; also sends ``sampling/createMessage``,
  ``elicitation/create`` and ``roots/list`` and checks the host refuses them
  with -32003 / -32004 (with ``--expect-sampling-result`` it instead expects the
  deliberately broken host of ``--break sampling-accept`` to answer with a
  result); answers release and closes 4005.
- ``bad-token``: dials with a wrong token; the upgrade must fail with HTTP 401.
- ``bad-subprotocol``: offers agentfy.worker.v2; the upgrade must fail with HTTP 426.
- ``redial``: after running on a first socket, redials with the same
  instanceId and attempt 1 (the old socket must get 4009 and the host must
  re-run tools/list on the new one), then dials with another instanceId (must
  get 4002), then finishes the session on the second socket.

Exits 0 when every expectation held, 1 otherwise (with the reason on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Optional

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from contract_sdk import toolchannel as tc

SUB = "agentfy.worker.v1"
DEADLINE = 20.0


class Expectation(Exception):
    pass


def check(frame: str | bytes) -> dict[str, Any]:
    tc.check_ws_message(frame)
    tc.decode_ws_message(frame)  # every host frame must be a valid JSON-RPC message of the contract
    msg = json.loads(frame)
    if not isinstance(msg, dict):
        raise Expectation(f"host sent a non-object frame: {frame!r}")
    return msg


async def recv(ws: ClientConnection) -> dict[str, Any]:
    return check(await asyncio.wait_for(ws.recv(), DEADLINE))


async def send(ws: ClientConnection, msg: dict[str, Any]) -> None:
    data = json.dumps(msg)
    tc.decode_ws_message(data)  # our own frames too
    await ws.send(data)


class Worker:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.next_id = 1
        self.heartbeat_interval = 10

    async def dial(self, token: str, sub: str = SUB) -> ClientConnection:
        return await asyncio.wait_for(
            connect(self.a.url, subprotocols=[sub], additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=DEADLINE),
            DEADLINE,
        )

    async def handshake(self, ws: ClientConnection, instance: str, attempt: int) -> None:
        init = await recv(ws)
        if init.get("method") != "initialize":
            raise Expectation(f"first frame is not initialize: {init}")
        p = init["params"]
        if p["capabilities"] != {}:
            raise Expectation(f"host declared capabilities {p['capabilities']}")
        if "dialSeconds" in p["_meta"]["agentfy"]["budgets"]:
            raise Expectation("dialSeconds travelled in initialize")
        self.heartbeat_interval = p["_meta"]["agentfy"]["budgets"]["heartbeatIntervalSeconds"]
        await send(ws, {"jsonrpc": "2.0", "id": init["id"], "result": {
            "protocolVersion": "2025-06-18",
            "serverInfo": {"name": "agentfy-worker", "version": "mini-test"},
            "capabilities": {"tools": {"listChanged": True}, "logging": {}},
            "_meta": {"agentfy": {"sessionId": self.a.session_id, "channelVersion": "1.1.0", "instanceId": instance, "attempt": attempt}},
        }})
        await send(ws, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        await send(ws, {"jsonrpc": "2.0", "method": "agentfy/ready", "params": {
            "sessionId": self.a.session_id, "tools": ["echo"], "workspace": "/workspace", "bootMillis": 5}})
        tl = await recv(ws)
        if tl.get("method") != "tools/list":
            raise Expectation(f"expected tools/list after ready, got {tl}")
        await send(ws, {"jsonrpc": "2.0", "id": tl["id"], "result": {"tools": [
            {"name": "echo", "description": "Return the text.", "inputSchema": {"type": "object"}}]}})

    async def request(self, ws: ClientConnection, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rid = f"w-{self.next_id}"
        self.next_id += 1
        await send(ws, {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            m = await recv(ws)
            if m.get("id") == rid and "method" not in m:
                return m
            await self.serve_one(ws, m)

    async def serve_one(self, ws: ClientConnection, m: dict[str, Any]) -> Optional[str]:
        method = m.get("method")
        if method == "tools/call":
            text = m["params"].get("arguments", {}).get("text", "")
            await send(ws, {"jsonrpc": "2.0", "id": m["id"], "result": {"content": [{"type": "text", "text": text}], "isError": False}})
            return "call"
        if method == "agentfy/release":
            await send(ws, {"jsonrpc": "2.0", "id": m["id"], "result": {"accepted": True, "outputsFlushed": True, "outputs": []}})
            await ws.close(4005, "released")
            return "released"
        raise Expectation(f"unexpected frame from the host: {m}")

    async def heartbeat(self, ws: ClientConnection) -> None:
        r = await self.request(ws, "agentfy/heartbeat", {
            "sessionId": self.a.session_id, "idleSeconds": 0, "execSeconds": 1, "activeToolCalls": 0,
            "workspaceBytes": 0, "channelVersion": "1.1.0"})
        if r.get("result", {}).get("continue") is not True:
            raise Expectation(f"heartbeat answer {r}")

    async def run_session(self, ws: ClientConnection) -> None:
        """Serve until released; one heartbeat per interval; the reverse requests once."""
        probed = False
        while True:
            try:
                m = await asyncio.wait_for(ws.recv(), self.heartbeat_interval)
            except asyncio.TimeoutError:
                await self.heartbeat(ws)
                continue
            what = await self.serve_one(ws, check(m))
            if what == "released":
                return
            if what == "call" and not probed:
                probed = True
                await self.probe_reverse(ws)
                await self.heartbeat(ws)

    async def probe_reverse(self, ws: ClientConnection) -> None:
        r = await self.request(ws, "sampling/createMessage", {"messages": [], "maxTokens": 1})
        if self.a.expect_sampling_result:
            if "result" not in r:
                raise Expectation(f"--break sampling-accept host did not answer with a result: {r}")
        elif r.get("error", {}).get("code") != -32003:
            raise Expectation(f"sampling/createMessage not refused with -32003: {r}")
        for method, code in (("elicitation/create", -32004), ("roots/list", -32004)):
            r = await self.request(ws, method, {})
            if r.get("error", {}).get("code") != code:
                raise Expectation(f"{method} not refused with {code}: {r}")

    async def expect_close(self, ws: ClientConnection, code: int) -> None:
        try:
            while True:
                await asyncio.wait_for(ws.recv(), DEADLINE)
        except ConnectionClosed as e:
            got = e.rcvd.code if e.rcvd else None
            if got != code:
                raise Expectation(f"socket closed with {got}, want {code}") from None

    async def main(self) -> None:
        s = self.a.scenario
        if s in ("bad-token", "bad-subprotocol"):
            want = 401 if s == "bad-token" else 426
            try:
                ws = await self.dial("wrong-token" if s == "bad-token" else self.a.token,
                                     SUB if s == "bad-token" else "agentfy.worker.v2")
            except InvalidStatus as e:
                if e.response.status_code != want:
                    raise Expectation(f"HTTP {e.response.status_code}, want {want}") from None
                if want == 426 and e.response.headers.get("Sec-WebSocket-Protocol") != SUB:
                    raise Expectation("426 without the host's majors") from None
                return
            await ws.close()
            raise Expectation(f"upgrade succeeded, want HTTP {want}")
        ws = await self.dial(self.a.token)
        await self.handshake(ws, "inst-A", 0)
        if s == "redial":
            ws2 = await self.dial(self.a.token)
            await self.handshake(ws2, "inst-A", 1)
            await self.expect_close(ws, 4009)
            ws3 = await self.dial(self.a.token)
            init = await recv(ws3)
            await send(ws3, {"jsonrpc": "2.0", "id": init["id"], "result": {
                "protocolVersion": "2025-06-18", "serverInfo": {"name": "agentfy-worker", "version": "mini-test"},
                "capabilities": {"tools": {"listChanged": True}},
                "_meta": {"agentfy": {"sessionId": self.a.session_id, "channelVersion": "1.1.0", "instanceId": "inst-B", "attempt": 5}}}})
            await self.expect_close(ws3, 4002)
            ws = ws2
        await self.run_session(ws)


async def amain() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--session-id", required=True)
    ap.add_argument("--scenario", choices=["normal", "bad-token", "bad-subprotocol", "redial"], default="normal")
    ap.add_argument("--expect-sampling-result", action="store_true")
    a = ap.parse_args()
    try:
        await asyncio.wait_for(Worker(a).main(), 60)
    except (Expectation, ConnectionClosed, asyncio.TimeoutError, OSError) as e:
        print(f"mini_worker[{a.scenario}]: FAIL {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"mini_worker[{a.scenario}]: ok", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(amain()))
