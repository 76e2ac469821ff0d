#!/usr/bin/env python3
"""Self-check of examples/toolchannel/worker.py against a minimal scripted host.

The host here is a TEST FIXTURE played with Python `websockets`, not a reference peer
(the reference host is the Rust one in examples/toolchannel/host/). Each scenario starts
a host script, launches worker.py as a child process, and checks both the frames the
worker sends (decoded with the generated SDK) and its exit code. Two scenarios run
through `contract-proxy run --contract toolchannel` and check its violation count.
Prints PASS/FAIL per check; exits 1 if any check fails.

Usage: .venv-peers/bin/python examples/toolchannel/test_worker.py [SCENARIO...]
(env CONTRACTGEN, PROXY override the tool paths)
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from typing import Any, Awaitable, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SDK = os.path.join(ROOT, "target", "examples-sdk", "python", "toolchannel")
RUNTIME = SDK + "-runtime"
_BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug")
CONTRACTGEN = os.environ.get("CONTRACTGEN", os.path.join(_BIN, "contractgen"))
PROXY = os.environ.get("PROXY", os.path.join(_BIN, "contract-proxy"))
WORKER = os.path.join(HERE, "worker.py")
STEP = 10.0  # deadline for any single expected frame or event
TOKEN = "t0k-" + "ab" * 8
SESSION = "ars_01J9ZK3M7Q"
SUBPROTOCOL = "agentfy.worker.v1"


def generate_sdk() -> None:
    shutil.rmtree(SDK, ignore_errors=True)
    subprocess.run(
        [CONTRACTGEN, "generate", "--lang", "python", "--out", SDK, os.path.join(ROOT, "schema", "contracts", "toolchannel.json")],
        check=True, stdout=subprocess.DEVNULL, timeout=120,
    )
    subprocess.run(
        [CONTRACTGEN, "runtime", "--lang", "python", "--out", RUNTIME],
        check=True, stdout=subprocess.DEVNULL, timeout=120,
    )
    sys.path[:0] = [SDK, RUNTIME]


generate_sdk()
import msgspec  # noqa: E402
from websockets.asyncio.server import ServerConnection, serve  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.http11 import Request, Response  # noqa: E402

import contract_runtime as sdk_rt  # noqa: E402
from contract_sdk import toolchannel as tc  # noqa: E402

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    RESULTS.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'} {name}{'' if ok or not detail else ': ' + detail}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the scripted host ------------------------------------------------------------


class Peer:
    """One accepted worker socket, seen from the test host."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.heartbeats: list[Any] = []
        self.order: list[str] = []
        self.auto_heartbeat = True
        self.hb_continue = True

    async def send(self, obj: Any) -> None:
        await self.ws.send(tc.encode(obj).decode())

    async def request(self, rid: int, method: str, params: Any) -> None:
        p = json.loads(tc.encode(params)) if not isinstance(params, dict) else params
        await self.send(tc.JsonRpcRequest(jsonrpc="2.0", id=rid, method=method, params=p))

    async def recv(self) -> Any:
        """Next worker message other than a heartbeat (heartbeats are answered here)."""
        while True:
            raw = await asyncio.wait_for(self.ws.recv(), STEP)
            msg = tc.decode_ws_message(raw)  # the worker's frame must be a contract JSON-RPC message
            if isinstance(msg, (tc.JsonRpcRequest, tc.JsonRpcNotification)):
                self.order.append(msg.method)
            if isinstance(msg, tc.JsonRpcRequest) and msg.method == "agentfy/heartbeat" and self.auto_heartbeat:
                self.heartbeats.append(sdk_rt.convert(tc.HeartbeatParams, msg.params))
                res = tc.HeartbeatResult(continue_=self.hb_continue, idle_budget_seconds=90, exec_budget_seconds=900)
                await self.send(tc.JsonRpcResponse(jsonrpc="2.0", id=msg.id, result=json.loads(tc.encode(res))))
                continue
            return msg

    async def closed(self) -> Optional[int]:
        try:
            await asyncio.wait_for(self.ws.wait_closed(), STEP)
        except asyncio.TimeoutError:
            return None
        return self.ws.close_code


def init_params(hb: int = 1, grace: int = 3) -> Any:
    budgets = tc.Budgets(
        handshake_seconds=10, ready_seconds=30, ready_ack_seconds=15, heartbeat_interval_seconds=hb,
        heartbeat_grace_seconds=grace, idle_seconds=90, max_exec_seconds=900, release_grace_seconds=30,
        reconnect_window_seconds=60,
    )
    return tc.InitializeParams(
        protocol_version="2025-06-18",
        client_info=tc.Implementation(name="agentfy-worker-gateway", version="test-host"),
        capabilities={},
        meta=tc.InitializeParamsMeta(
            agentfy=tc.AgentfyInitializeMeta(session_id=SESSION, channel_version="1.3.0", profile=tc.ProfileName.LIGHT, budgets=budgets)
        ),
    )


async def handshake(p: Peer, rid: int = 1) -> tuple[Any, list[str]]:
    """initialize → result; then the two worker notifications, in the order they came."""
    await p.request(rid, "initialize", init_params())
    res = await p.recv()
    assert isinstance(res, tc.JsonRpcResponse) and res.id == rid, f"initialize answer: {res!r}"
    result = sdk_rt.convert(tc.InitializeResult, res.result)
    notes = []
    for _ in range(2):
        n = await p.recv()
        assert isinstance(n, tc.JsonRpcNotification), f"expected a notification, got {n!r}"
        notes.append(n.method)
        if n.method == "agentfy/ready":
            p.ready = sdk_rt.convert(tc.ReadyParams, n.params)  # type: ignore[attr-defined]
    return result, notes


async def answer(p: Peer, rid: int) -> Any:
    m = await p.recv()
    assert isinstance(m, (tc.JsonRpcResponse, tc.JsonRpcErrorResponse)) and m.id == rid, f"answer to {rid}: {m!r}"
    return m


def err_code(m: Any) -> Optional[int]:
    return m.error.code if isinstance(m, tc.JsonRpcErrorResponse) else None


async def release(p: Peer, rid: int, reason: str = "explicit") -> Any:
    await p.request(rid, "agentfy/release", tc.ReleaseParams(session_id=SESSION, reason=tc.ReleaseReason(reason), grace_seconds=30))
    m = await answer(p, rid)
    return sdk_rt.convert(tc.ReleaseResult, m.result) if isinstance(m, tc.JsonRpcResponse) else m


# --- harness -------------------------------------------------------------------------

Script = Callable[[asyncio.Queue], Awaitable[None]]


async def run_case(
    name: str,
    script: Script,
    want_exit: int,
    worker_args: Optional[list[str]] = None,
    reject: Optional[int] = None,
    via_proxy: bool = False,
    env: Optional[dict[str, str]] = None,
) -> Optional[list[dict[str, Any]]]:
    """Run one scenario; returns the proxy's JSON events when via_proxy."""
    conns: asyncio.Queue = asyncio.Queue()

    def process_request(conn: ServerConnection, req: Request) -> Optional[Response]:
        if req.headers.get("Authorization") != f"Bearer {TOKEN}" or reject == 401:
            return conn.respond(401, "unauthorized\n")
        if SUBPROTOCOL not in req.headers.get("Sec-WebSocket-Protocol", "") or reject == 426:
            r = conn.respond(426, "upgrade required\n")
            r.headers["Sec-WebSocket-Protocol"] = "agentfy.worker.v2"
            return r
        return None

    async def handler(ws: ServerConnection) -> None:
        done = asyncio.get_running_loop().create_future()
        await conns.put((Peer(ws), done))
        await done  # the script owns the socket until it resolves this

    hport = free_port()
    proxy: Optional[asyncio.subprocess.Process] = None
    events: list[dict[str, Any]] = []
    work = tempfile.mkdtemp(prefix="tcw.")
    async with serve(handler, "127.0.0.1", hport, subprotocols=[SUBPROTOCOL], process_request=process_request, ping_interval=None):
        url = f"ws://127.0.0.1:{hport}/worker"
        if via_proxy:
            pport = free_port()
            proxy = await asyncio.create_subprocess_exec(
                PROXY, "run", "--contract", "toolchannel", "--listen", f"ws://127.0.0.1:{pport}/worker",
                "--upstream", url, "--log", "json",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            assert proxy.stderr is not None
            line = await asyncio.wait_for(proxy.stderr.readline(), STEP)
            if b"listening" not in line:
                check(f"{name}: proxy started", False, line.decode(errors="replace"))
                return None
            url = f"ws://127.0.0.1:{pport}/worker"
        wenv = {k: v for k, v in os.environ.items() if k not in ("WORKER_TOKEN", "WORKER_TOKEN_FILE")}
        wenv["PYTHONPATH"] = os.pathsep.join([SDK, RUNTIME])
        wenv.update(env or {})
        worker = await asyncio.create_subprocess_exec(
            sys.executable, WORKER, "--url", url, "--token", TOKEN, "--session-id", SESSION,
            "--instance-id", "inst_test", "--workspace", os.path.join(work, "ws"), *(worker_args or []),
            env=wenv, stderr=asyncio.subprocess.PIPE,
        )
        try:
            await asyncio.wait_for(script(conns), 60)
            script_ok, why = True, ""
        except Exception as e:  # an assertion in the script, or a deadline
            script_ok, why = False, f"{type(e).__name__}: {e}"
        try:
            rc = await asyncio.wait_for(worker.wait(), 90)
        except asyncio.TimeoutError:
            worker.kill()
            rc = await worker.wait()
            why += " (worker killed after the deadline)"
        assert worker.stderr is not None
        err = (await worker.stderr.read()).decode(errors="replace")
        check(f"{name}: host script", script_ok, why + "\n" + err[-1500:] if not script_ok else "")
        check(f"{name}: worker exit {want_exit}", rc == want_exit, f"got {rc}\n{err[-1500:]}")
        # release every socket still held by a script
        while not conns.empty():
            p, done = conns.get_nowait()
            if not done.done():
                done.set_result(None)
        if proxy is not None:
            proxy.terminate()
            out, perr = await asyncio.wait_for(proxy.communicate(), 15)
            events = [json.loads(l) for l in out.decode().splitlines() if l.startswith("{")]
            with open(os.path.join(work, "proxy.log"), "w") as f:
                f.write(out.decode())
    shutil.rmtree(work, ignore_errors=True)
    return events if via_proxy else None



async def take(conns: asyncio.Queue) -> tuple[Peer, asyncio.Future]:
    return await asyncio.wait_for(conns.get(), STEP)


# --- scenarios ----------------------------------------------------------------------


async def lifecycle_script(conns: asyncio.Queue, expect_order: bool = True) -> None:
    p, done = await take(conns)
    result, notes = await handshake(p)
    meta = result.meta.agentfy
    assert (meta.session_id, meta.instance_id, meta.attempt) == (SESSION, "inst_test", 0), f"identity {meta!r}"
    assert meta.channel_version == "1.1.0" and result.protocol_version == "2025-06-18"
    if expect_order:
        assert notes == ["notifications/initialized", "agentfy/ready"], f"order {notes}"
    assert p.ready.tools == ["echo", "file"], p.ready  # type: ignore[attr-defined]
    # tools/call before tools/list: the worker is not serving yet
    await p.request(2, "tools/call", tc.CallToolParams(name="echo", arguments={"text": "early"}))
    assert err_code(await answer(p, 2)) == tc.ErrorCode.SESSION_NOT_RUNNING
    await p.request(3, "tools/list", tc.ListToolsParams())
    lst = sdk_rt.convert(tc.ListToolsResult, (await answer(p, 3)).result)
    assert [t.name for t in lst.tools] == ["echo", "file"]
    await p.request(4, "tools/call", tc.CallToolParams(name="echo", arguments={"text": "hi"}))
    r = sdk_rt.convert(tc.CallToolResult, (await answer(p, 4)).result)
    assert r.content[0].text == "hi", r
    await p.request(5, "tools/call", tc.CallToolParams(name="file", arguments={"op": "write", "path": "out.txt", "content": "42"}))
    r = sdk_rt.convert(tc.CallToolResult, (await answer(p, 5)).result)
    assert r.is_error is msgspec.UNSET, r
    await p.request(6, "tools/call", tc.CallToolParams(name="nope"))
    assert err_code(await answer(p, 6)) == tc.ErrorCode.INVALID_PARAMS
    await p.request(7, "done", {})
    assert err_code(await answer(p, 7)) == tc.ErrorCode.CAPABILITY_NOT_NEGOTIATED
    # wait for a heartbeat (interval 1 s) and check its clocks and effective version
    for _ in range(50):
        if p.heartbeats:
            break
        await p.request(100 + _, "tools/call", tc.CallToolParams(name="echo", arguments={"text": "x"}))
        await answer(p, 100 + _)
        await asyncio.sleep(0.1)
    assert p.heartbeats, "no agentfy/heartbeat"
    hb = p.heartbeats[0]
    assert hb.channel_version == "1.1.0" and hb.session_id == SESSION and hb.active_tool_calls == 0, hb
    rel = await release(p, 8)
    assert rel.accepted and rel.outputs_flushed and [o.uri for o in rel.outputs] == [f"store://{SESSION}/out.txt"], rel
    code = await p.closed()
    assert code == tc.CloseCodes.RELEASED, f"close code {code}"
    done.set_result(None)


async def close_after_init(conns: asyncio.Queue, code: int) -> None:
    p, done = await take(conns)
    await handshake(p)
    await p.ws.close(code, f"{code} test")
    done.set_result(None)


async def drain_script(conns: asyncio.Queue) -> None:
    p, done = await take(conns)
    await handshake(p)
    await p.request(2, "tools/list", tc.ListToolsParams())
    await answer(p, 2)
    await p.ws.close(tc.CloseCodes.DRAINING, "4008 draining")
    done.set_result(None)
    p2, done2 = await take(conns)
    result, _ = await handshake(p2)
    meta = result.meta.agentfy
    assert (meta.instance_id, meta.attempt) == ("inst_test", 1), f"redial identity {meta!r}"
    await p2.request(3, "tools/list", tc.ListToolsParams())
    await answer(p2, 3)
    rel = await release(p2, 4, "idle")
    assert rel.accepted, rel
    assert await p2.closed() == tc.CloseCodes.RELEASED
    done2.set_result(None)


async def wind_down_script(conns: asyncio.Queue) -> None:
    p, done = await take(conns)
    p.hb_continue = False
    await handshake(p)
    await p.request(2, "tools/list", tc.ListToolsParams())
    await answer(p, 2)
    code = None
    try:
        await p.recv()  # the heartbeat is answered continue:false; the worker then closes
    except ConnectionClosed:
        code = p.ws.close_code
    assert code == tc.CloseCodes.RELEASED, f"close code {code}"
    done.set_result(None)


async def bad_frames_script(conns: asyncio.Queue) -> None:
    p, done = await take(conns)
    codes = []
    for i in range(tc.BAD_FRAMES_MAX):
        await p.ws.send("not json {" if i % 2 else "[1,2]")
    try:
        while True:
            m = await p.recv()
            codes.append(err_code(m))
    except ConnectionClosed:
        pass
    assert codes == [tc.ErrorCode.INVALID_REQUEST, tc.ErrorCode.PARSE_ERROR] * (tc.BAD_FRAMES_MAX // 2), codes
    assert p.ws.close_code == tc.CloseCodes.BAD_FRAMES, p.ws.close_code
    done.set_result(None)


async def silent_host(conns: asyncio.Queue) -> None:
    # never send initialize: the worker gives up after handshakeSeconds, redials, exits 75
    seen = 0
    try:
        while True:
            p, done = await asyncio.wait_for(conns.get(), 8)
            seen += 1
            done.set_result(None)
    except asyncio.TimeoutError:
        pass
    assert seen >= 2, f"{seen} dials"


async def no_conn(_conns: asyncio.Queue) -> None:
    return None


async def main(selected: list[str]) -> int:
    cases: dict[str, Callable[[], Awaitable[Any]]] = {
        "lifecycle": lambda: run_case("lifecycle", lifecycle_script, 0),
        "http401": lambda: run_case("http401", no_conn, 77, reject=401),
        "http426": lambda: run_case("http426", no_conn, 78, reject=426),
        "close4002": lambda: run_case("close4002", lambda c: close_after_init(c, 4002), 77),
        "close4004": lambda: run_case("close4004", lambda c: close_after_init(c, 4004), 75),
        "close4003": lambda: run_case("close4003", lambda c: close_after_init(c, 4003), 78),
        "drain4008": lambda: run_case("drain4008", drain_script, 0),
        "winddown": lambda: run_case("winddown", wind_down_script, 0),
        "badframes": lambda: run_case("badframes", bad_frames_script, 78),
        "silence": lambda: run_case("silence", silent_host, 75,
                                    env={"AGENTFY_BUDGETS": '{"handshakeSeconds": 1, "reconnectWindowSeconds": 3}'}),
        "bothtokens": lambda: run_case("bothtokens", no_conn, 78, env={"WORKER_TOKEN": "a", "WORKER_TOKEN_FILE": "/dev/null"}),
        "early-ready": lambda: run_case("early-ready", early_ready_script, 0, worker_args=["--break", "early-ready"]),
        "proxy-lifecycle": proxy_lifecycle,
        "proxy-early-ready": proxy_early_ready,
    }
    for name, fn in cases.items():
        if selected and name not in selected:
            continue
        print(f"== {name}", flush=True)
        await fn()
    failed = [n for n, ok, _ in RESULTS if not ok]
    print()
    print(f"toolchannel worker self-check: {len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed or not RESULTS else 0


async def early_ready_script(conns: asyncio.Queue) -> None:
    p, done = await take(conns)
    _, notes = await handshake(p)
    check("early-ready: ready arrived BEFORE notifications/initialized", notes == ["agentfy/ready", "notifications/initialized"], str(notes))
    await p.request(2, "tools/list", tc.ListToolsParams())
    await answer(p, 2)
    rel = await release(p, 3)
    assert rel.accepted, rel
    assert await p.closed() == tc.CloseCodes.RELEASED
    done.set_result(None)


def violations(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if isinstance(e.get("verdict"), dict) and e["verdict"].get("verdict") != "ok"]


async def proxy_lifecycle() -> None:
    ev = await run_case("proxy-lifecycle", lifecycle_script, 0, via_proxy=True)
    if ev is None:
        return
    frames = [e for e in ev if "method" in e]
    check("proxy-lifecycle: proxy relayed the session", len(frames) >= 20, f"{len(frames)} frames")
    bad = violations(ev)
    # The scripted host itself breaks rules on purpose (tools/call before tools/list, an unknown
    # method); those are host-side violations. The WORKER must cause none.
    worker_bad = [e for e in bad if e.get("from") == "worker"]
    check("proxy-lifecycle: 0 violations by the worker", not worker_bad, json.dumps(worker_bad)[:1500])


async def proxy_early_ready() -> None:
    ev = await run_case("proxy-early-ready", early_ready_script, 0, worker_args=["--break", "early-ready"], via_proxy=True)
    if ev is None:
        return
    bad = [e for e in violations(ev) if e.get("from") == "worker"]
    check("proxy-early-ready: proxy flagged the worker's early agentfy/ready", bool(bad),
          "no violation reported by the proxy" if not bad else "")


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
