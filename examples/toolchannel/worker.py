#!/usr/bin/env python3
"""toolchannel reference worker (seed 004, contract schema/contracts/toolchannel.json).

The sandbox side of the agentfy tool channel, written with the generated Python SDK
(`contract_sdk.toolchannel`): it dials OUT over WebSocket (`websockets`) with
`Authorization: Bearer <token>` and subprotocol `agentfy.worker.v1`, answers the
host's initialize, sends notifications/initialized then agentfy/ready, serves
tools/list and tools/call (tools `echo` and `file`), sends agentfy/heartbeat every
heartbeatIntervalSeconds, answers agentfy/release with a report and closes 4005.
Every message in and out is validated with the SDK. Close codes and HTTP statuses
decide the exit code (contract tables closeCodes/httpStatus → workerExit):
0 released, 75 silence (reconnect window expired, 4004), 77 token/session rejected
(401, 4002), 78 disagreement (426, 4001, 4003, 4006, 1009, both token env vars).

Usage: see examples/toolchannel/README.md, or `worker.py --help`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any, Optional

try:
    import msgspec
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, NegotiationError
    from websockets.typing import Subprotocol

    import contract_runtime as sdk_rt
    from contract_sdk import toolchannel as tc
except ImportError as e:  # the SDK is generated, never committed
    sys.stderr.write(
        f"worker.py: cannot import a dependency ({e}); generate the SDK with\n"
        "  contractgen generate --lang python --out DIR schema/contracts/toolchannel.json\n"
        "  contractgen runtime --lang python --out DIR-runtime\n"
        "and put DIR and DIR-runtime on PYTHONPATH (examples/toolchannel/test_worker.py does this).\n"
    )
    sys.exit(1)

SUBPROTOCOL = "agentfy.worker.v1"
MCP_VERSIONS = ("2025-06-18",)  # the MCP versions this worker speaks, newest first
CHANNEL_VERSION = "1.1.0"
WORKER_NAME = "agentfy-worker"
WORKER_TAG = "worker-reference-py"
E = tc.ErrorCode
W = tc.WorkerLifecycleState
X = tc.WorkerExit
CC = tc.CloseCodes

# Contract table closeCodes, member `maps.workerExit` (the SDK carries no `maps`): the exit a
# received close code implies. Absent: 4008 and 1006 reconnect, 1001 reconnects, 4009 see below.
CLOSE_EXIT: dict[int, X] = {
    CC.VERSION_UNSUPPORTED: X.EX_CONFIG,
    CC.SESSION_REJECTED: X.EX_NOPERM,
    CC.HANDSHAKE_DEADLINE: X.EX_CONFIG,
    CC.HEARTBEAT_LOST: X.EX_TEMPFAIL,
    CC.RELEASED: X.EXIT0,
    CC.BAD_FRAMES: X.EX_CONFIG,
    CC.MESSAGE_TOO_BIG: X.EX_CONFIG,
}
# Reverse capabilities are never declared: the worker transport refuses to emit them (layer 3).
REFUSED_PREFIXES = ("sampling/", "elicitation/", "roots/")
# Methods this contract lets the host send / the worker send (wrong-direction detection).
HOST_REQUESTS = {"initialize", "tools/list", "tools/call", "agentfy/release"}
WORKER_ONLY = {"agentfy/heartbeat", "sampling/createMessage", "elicitation/create", "roots/list",
               "agentfy/ready", "notifications/initialized", "notifications/progress",
               "notifications/tools/list_changed", "notifications/message"}
BUDGET_KEYS = [f.encode_name for f in msgspec.structs.fields(tc.Budgets)]


class Exit(Exception):
    """Leave the worker with a contract exit code."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


class Lost(Exception):
    """The channel is deemed lost: reconnect within the window."""


def log(text: str) -> None:
    sys.stderr.write(f"[worker] {text}\n")
    sys.stderr.flush()


def semver(v: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in v.split("-")[0].split("."))
    except ValueError:
        return (0,)


def convert(tp: Any, raw: Any) -> Any:
    """SDK validation of an already-parsed member (params/result) as `tp`."""
    return sdk_rt.convert(tp, raw)


def to_builtins(obj: Any) -> Any:
    return json.loads(tc.encode(obj))


class Worker:
    def __init__(self, a: argparse.Namespace, token: str) -> None:
        self.a = a
        self.token = token
        self.session_id: str = a.session_id
        self.instance_id: str = a.instance_id or f"inst_{uuid.uuid4().hex[:12]}"
        self.attempt: int = a.attempt
        self.started = time.monotonic()
        self.last_call_done = time.monotonic()
        self.state = W.DIALING
        self.ws: Optional[ClientConnection] = None
        self.next_id = 0
        self.pending: dict[Any, asyncio.Future[Any]] = {}
        self.active_calls: dict[Any, asyncio.Task[Any]] = {}
        self.bad_frames = 0
        self.effective = CHANNEL_VERSION
        self.env_budgets: dict[str, int] = json.loads(a.budgets) if a.budgets else {}
        self.budgets: dict[str, float] = {}
        self.idle_budget: Optional[float] = None
        self.exec_budget: Optional[float] = None
        self.workspace = os.path.abspath(a.workspace)
        os.makedirs(self.workspace, exist_ok=True)
        self.outputs: list[str] = []
        self.tools = [t for t in a.tools.split(",") if t in TOOLS]
        self.boot_started = time.monotonic()
        self.released = False
        self.recovered = False  # set by a successful initialize after a loss

    # --- lifecycle bookkeeping ---------------------------------------------------

    def go(self, new: W) -> None:
        if new is not self.state:
            tc.check_worker_lifecycle_transition(self.state, new)
            log(f"{self.state.value} -> {new.value}")
            self.state = new

    def budget(self, key: str, default: float) -> float:
        return float(self.budgets.get(key, default))

    # --- sending (every outgoing message goes through the SDK) -------------------

    async def send(self, obj: Any) -> None:
        data = tc.encode(obj)
        tc.check_ws_message(data)
        tc.decode_ws_message(data)  # a JSON-RPC message the contract accepts
        assert self.ws is not None
        await self.ws.send(data.decode("utf-8"))

    async def notify(self, method: str, params_obj: Any, params_tp: Any = None) -> None:
        params = to_builtins(params_obj) if params_obj is not None else msgspec.UNSET
        if params_tp is not None:
            convert(params_tp, params)
        await self.send(tc.JsonRpcNotification(jsonrpc="2.0", method=method, params=params))

    async def request(self, method: str, params_obj: Any, params_tp: Any, timeout: float) -> Any:
        if method.startswith(REFUSED_PREFIXES):
            raise RuntimeError(f"refusing to emit {method}: capability never negotiated")
        self.next_id += 1
        rid = self.next_id
        params = to_builtins(params_obj)
        convert(params_tp, params)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        try:
            await self.send(tc.JsonRpcRequest(jsonrpc="2.0", id=rid, method=method, params=params))
            return await asyncio.wait_for(fut, timeout)
        finally:
            self.pending.pop(rid, None)

    async def reply(self, rid: Any, result_obj: Any, result_tp: Any) -> None:
        result = to_builtins(result_obj)
        convert(result_tp, result)
        await self.send(tc.JsonRpcResponse(jsonrpc="2.0", id=rid, result=result))

    async def error(self, rid: Any, code: E, message: Optional[str] = None, data: Any = msgspec.UNSET) -> None:
        err = tc.JsonRpcError(code=int(code), message=message or (code.wire_name or code.name), data=data)
        await self.send(tc.JsonRpcErrorResponse(jsonrpc="2.0", id=rid, error=err))

    async def close(self, code: int, reason: str) -> None:
        if self.ws is not None:
            reason_b = reason.encode()[: tc.CLOSE_REASON_MAX_BYTES].decode("utf-8", "ignore")
            try:
                await asyncio.wait_for(self.ws.close(code, reason_b), 5)
            except (asyncio.TimeoutError, OSError):
                pass

    # --- one connection ----------------------------------------------------------

    async def dial(self) -> ClientConnection:
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.a.brk == "no-token":
            log("--break no-token: dialing without Authorization")
            headers = {}
        try:
            return await connect(
                self.a.url,
                subprotocols=[Subprotocol(SUBPROTOCOL)],
                additional_headers=headers,
                proxy=None,  # the pod dials CONTROL_URL directly; never an env proxy
                max_size=tc.MAX_MESSAGE_BYTES,
                ping_interval=tc.WS_PING_INTERVAL_SECONDS,
                ping_timeout=tc.WS_PING_INTERVAL_SECONDS,
                open_timeout=tc.HANDSHAKE_SECONDS,
                compression=None,
            )
        except InvalidStatus as e:
            status = e.response.status_code
            if status == tc.HttpStatus.UNAUTHORIZED:
                raise Exit(X.EX_NOPERM, "HTTP 401: token rejected at the upgrade") from None
            if status == tc.HttpStatus.UPGRADE_REQUIRED:
                theirs = e.response.headers.get("Sec-WebSocket-Protocol", "")
                raise Exit(X.EX_CONFIG, f"HTTP 426: host speaks [{theirs}], worker speaks [{SUBPROTOCOL}]") from None
            raise Lost(f"HTTP {status} at the upgrade") from None
        except NegotiationError as e:
            raise Exit(X.EX_CONFIG, f"subprotocol disagreement at the upgrade: {e}") from None
        except InvalidHandshake as e:
            # e.g. the connection broke before a response: a transport break, not a refusal
            raise Lost(f"upgrade failed: {e}") from None

    async def connection(self) -> None:
        """Run one socket until it ends; raises Exit or Lost."""
        ws = await self.dial()
        if ws.subprotocol != SUBPROTOCOL:
            self.ws = ws
            await self.close(CC.VERSION_UNSUPPORTED, f"4001 subprotocol host={ws.subprotocol} worker={SUBPROTOCOL}")
            raise Exit(X.EX_CONFIG, f"host selected subprotocol {ws.subprotocol!r}, worker speaks {SUBPROTOCOL}")
        self.ws = ws
        self.bad_frames = 0
        self.go(W.AWAITING_INITIALIZE)
        hb: Optional[asyncio.Task[Any]] = None
        # Before any frame the environment's budget holds, else the contract's default,
        # scaled like every party's clock by CONTRACT_TIME_SCALE (a test run's).
        default = tc.HANDSHAKE_SECONDS * float(os.environ.get("CONTRACT_TIME_SCALE", "1"))
        deadline = asyncio.get_running_loop().time() + min(default, self.env_budgets.get("handshakeSeconds", default))
        try:
            while True:
                timeout = None
                if self.state in (W.AWAITING_INITIALIZE, W.AWAITING_TOOLS_LIST):
                    timeout = deadline - asyncio.get_running_loop().time()
                    if timeout <= 0:
                        what = "initialize" if self.state is W.AWAITING_INITIALIZE else "tools/list"
                        await self.close(CC.GOING_AWAY, f"no {what} in time")
                        raise Lost(f"no {what} within its deadline")
                try:
                    raw = await asyncio.wait_for(ws.recv(), timeout)
                except asyncio.TimeoutError:
                    continue
                before = self.state
                await self.on_frame(raw)
                if before is not W.AWAITING_TOOLS_LIST and self.state is W.AWAITING_TOOLS_LIST:
                    deadline = asyncio.get_running_loop().time() + self.budget("readyAckSeconds", tc.READY_ACK_SECONDS)
                if before is not W.SERVING and self.state is W.SERVING and hb is None:
                    hb = asyncio.get_running_loop().create_task(self.heartbeats())
                    hb.add_done_callback(lambda t: None if t.cancelled() else t.exception())
                if hb is not None and hb.done() and not hb.cancelled() and hb.exception() is not None:
                    raise hb.exception()  # type: ignore[misc]
        except ConnectionClosed as e:
            self.closed(e)
        finally:
            if hb is not None:
                hb.cancel()
            for f in self.pending.values():
                f.cancel()

    def closed(self, e: ConnectionClosed) -> None:
        rcvd, sent = e.rcvd, e.sent
        if rcvd is not None:
            code, reason = rcvd.code, rcvd.reason
            log(f"host closed {code} {reason!r}")
        elif sent is not None:
            code, reason = sent.code, sent.reason
        else:
            code, reason = CC.TRANSPORT_BREAK, "transport break"
        if sent is not None and rcvd is None and sent.code == CC.RELEASED:
            raise Exit(X.EXIT0, "released")
        if code in CLOSE_EXIT:
            raise Exit(CLOSE_EXIT[code], f"close {code} {reason}")
        if code == CC.DRAINING and self.a.brk == "drain-exits":
            log("--break drain-exits: taking the host's 4008 as the end, not redialling")
            raise Exit(X.EX_TEMPFAIL, f"close {code} {reason}")
        if code == CC.SUPERSEDED:
            # This worker keeps one socket, so nothing newer serves: treat as silence.
            raise Exit(X.EX_TEMPFAIL, "close 4009 superseded, but this worker has no newer socket")
        raise Lost(f"close {code} {reason}")

    # --- inbound frames -------------------------------------------------------------

    async def bad_frame(self, code: E, why: str) -> None:
        self.bad_frames += 1
        log(f"bad frame #{self.bad_frames}: {why}")
        await self.error(None, code)
        if self.bad_frames >= tc.BAD_FRAMES_MAX:
            await self.close(CC.BAD_FRAMES, f"4006 {self.bad_frames} bad frames")
            raise Exit(X.EX_CONFIG, "too many bad frames (sent 4006)")

    async def on_frame(self, raw: Any) -> None:
        if isinstance(raw, bytes):
            await self.bad_frame(E.INVALID_REQUEST, "binary message")
            return
        try:
            msg = tc.decode_ws_message(raw)
        except tc.DecodeFailure as e:
            # JSON, but not a message this channel takes: a top level that is no object, or
            # past the depth or item cap, is invalid (-32600), not a parse error (note T-18).
            parse = e.label == "parse" and e.rule not in ("depth", "items", "non-object", "null")
            await self.bad_frame(E.PARSE_ERROR if parse else E.INVALID_REQUEST, f"{e.label} {e.detail}")
            return
        if isinstance(msg, tc.JsonRpcRequest):
            await self.on_request(msg)
        elif isinstance(msg, tc.JsonRpcNotification):
            log(f"notification {msg.method} from the host ignored (unknown or wrong direction)")
        elif isinstance(msg, tc.JsonRpcResponse) or isinstance(msg, tc.JsonRpcErrorResponse):
            fut = self.pending.get(msg.id)
            if fut is None or fut.done():
                log(f"answer to unknown id {msg.id!r} ignored")
            else:
                fut.set_result(msg)

    async def on_request(self, req: Any) -> None:
        m = req.method
        if m not in HOST_REQUESTS:
            # unknown, undeclared or wrong-direction request (T-14, T-30)
            await self.error(req.id, E.CAPABILITY_NOT_NEGOTIATED, data={"method": m})
            return
        params = req.params if req.params is not msgspec.UNSET else {}
        try:
            if m == "initialize":
                await self.on_initialize(req.id, convert(tc.InitializeParams, params))
            elif m == "tools/list":
                await self.on_tools_list(req.id, convert(tc.ListToolsParams, params))
            elif m == "tools/call":
                await self.on_tools_call(req.id, convert(tc.CallToolParams, params))
            elif m == "agentfy/release":
                await self.on_release(req.id, params)
        except tc.DecodeFailure as e:
            await self.error(req.id, E.INVALID_PARAMS, f"INVALID_PARAMS {e.label} at {e.path}")

    async def on_initialize(self, rid: Any, p: Any) -> None:
        if self.state is not W.AWAITING_INITIALIZE:
            await self.error(rid, E.SESSION_NOT_RUNNING, "SESSION_NOT_RUNNING initialize out of order")
            return
        if p.capabilities:
            # Reverse capabilities are never negotiated (T-46).
            await self.error(rid, E.INVALID_PARAMS, "INVALID_PARAMS host capabilities must be {}")
            return
        meta = p.meta.agentfy
        host_budgets = to_builtins(meta.budgets)
        self.budgets = {}
        for k in BUDGET_KEYS:
            mine = self.env_budgets.get(k)
            theirs = host_budgets[k]
            if mine is not None and mine != theirs:
                log(f"budget {k}: environment {mine} != frame {theirs}; obeying {min(mine, theirs)}")
            self.budgets[k] = min(theirs, mine) if mine is not None else theirs
        self.idle_budget = self.budgets["idleSeconds"]
        self.exec_budget = self.budgets["maxExecSeconds"]
        # MCP version: the requested one if spoken, else the nearest this worker speaks.
        version = p.protocol_version if p.protocol_version in MCP_VERSIONS else MCP_VERSIONS[0]
        if self.a.brk == "echo-version":
            log(f"--break echo-version: claiming MCP {p.protocol_version}, spoken or not")
            version = p.protocol_version
        self.effective = min(meta.channel_version, CHANNEL_VERSION, key=semver)
        own_session = self.session_id
        if self.a.brk == "echo-session":
            log(f"--break echo-session: stating the host's sessionId {meta.session_id}, not SESSION_ID")
            own_session = meta.session_id
        result = tc.InitializeResult(
            protocol_version=version,
            server_info=tc.Implementation(name=WORKER_NAME, version=WORKER_TAG),
            capabilities=tc.ServerCapabilities(tools=tc.ServerCapabilitiesTools(list_changed=True), logging={}),
            meta=tc.InitializeResultMeta(
                agentfy=tc.AgentfyInitializeResultMeta(
                    session_id=own_session,
                    channel_version=CHANNEL_VERSION,
                    instance_id=self.instance_id,
                    attempt=self.attempt,
                )
            ),
        )
        await self.reply(rid, result, tc.InitializeResult)
        self.recovered = True
        ready = tc.ReadyParams(
            session_id=self.session_id,
            tools=self.tools,
            workspace=self.workspace,
            boot_millis=int((time.monotonic() - self.boot_started) * 1000),
        )
        if self.a.brk == "early-ready":
            log("--break early-ready: sending agentfy/ready BEFORE notifications/initialized")
            await self.notify("agentfy/ready", ready, tc.ReadyParams)
            await self.notify("notifications/initialized", None)
            self.go(W.PREPARING)
        else:
            await self.notify("notifications/initialized", None)
            self.go(W.PREPARING)
            # Executors are plain functions and the workspace is a directory: building is instant.
            await self.notify("agentfy/ready", ready, tc.ReadyParams)
        self.go(W.AWAITING_TOOLS_LIST)

    async def on_tools_list(self, rid: Any, _p: Any) -> None:
        if self.state not in (W.AWAITING_TOOLS_LIST, W.SERVING):
            await self.error(rid, E.SESSION_NOT_RUNNING, "SESSION_NOT_RUNNING tools/list before agentfy/ready")
            return
        result = tc.ListToolsResult(tools=[TOOLS[t]["tool"] for t in self.tools])
        await self.reply(rid, result, tc.ListToolsResult)
        self.go(W.SERVING)
        if self.a.brk == "ask-roots":
            log("--break ask-roots: asking for roots/list, which the host never declared")
            self.next_id += 1
            await self.send(tc.JsonRpcRequest(jsonrpc="2.0", id=self.next_id, method="roots/list", params=msgspec.UNSET))

    async def on_tools_call(self, rid: Any, p: Any) -> None:
        if self.state is not W.SERVING:
            await self.error(rid, E.SESSION_NOT_RUNNING, "SESSION_NOT_RUNNING")
            return
        if p.name not in self.tools:
            await self.error(rid, E.INVALID_PARAMS, f"INVALID_PARAMS unknown tool {p.name}")
            return
        args = p.arguments if p.arguments is not msgspec.UNSET else {}
        task = asyncio.get_running_loop().create_task(self.run_tool(rid, p.name, args))
        self.active_calls[rid] = task

    async def run_tool(self, rid: Any, name: str, args: dict[str, Any]) -> None:
        try:
            try:
                text = await TOOLS[name]["run"](self, args)
                result = tc.CallToolResult(content=[tc.TextContent(text=text)])
            except ToolError as e:
                result = tc.CallToolResult(content=[tc.TextContent(text=str(e))], is_error=True)
            await self.reply(rid, result, tc.CallToolResult)
            self.last_call_done = time.monotonic()  # only a COMPLETED call resets the idle clock
        except asyncio.CancelledError:
            # cancelled by a deadline/failed release: answered -32005 (T-55)
            await self.error(rid, E.SESSION_NOT_RUNNING, "SESSION_NOT_RUNNING cancelled by release")
        except ConnectionClosed:
            pass
        finally:
            self.active_calls.pop(rid, None)

    async def on_release(self, rid: Any, params: Any) -> None:
        try:
            p = convert(tc.ReleaseParams, params)
        except tc.DecodeFailure as e:
            # agentfy/* params are closed: an unpromised field is -32001, a wrong shape -32602 (T-35).
            if e.label == "unknown-field":
                await self.error(rid, E.CHANNEL_VERSION_MISMATCH, "CHANNEL_VERSION_MISMATCH unpromised field",
                                 data={"host": "?", "worker": self.effective, "level": "channel-minor"})
            else:
                await self.error(rid, E.INVALID_PARAMS, f"INVALID_PARAMS {e.label} at {e.path}")
            return
        if self.state is not W.SERVING:
            await self.error(rid, E.SESSION_NOT_RUNNING, "SESSION_NOT_RUNNING release before serving")
            return
        if self.active_calls and p.reason in (tc.ReleaseReason.IDLE, tc.ReleaseReason.EXPLICIT):
            log(f"release ({p.reason.value}) declined: {len(self.active_calls)} tools/call in flight")
            await self.reply(rid, tc.ReleaseResult(accepted=False, outputs_flushed=False, outputs=[]), tc.ReleaseResult)
            return
        log(f"release accepted: reason={p.reason.value} grace={p.grace_seconds}s")
        await self.teardown()
        outputs = [tc.ResourceLink(uri=f"store://{self.session_id}/{name}", name=name) for name in self.outputs]
        await self.reply(rid, tc.ReleaseResult(accepted=True, outputs_flushed=True, outputs=outputs), tc.ReleaseResult)
        if self.a.brk == "release-close":
            log("--break release-close: closing 1000 after the release result, not 4005")
            await self.close(1000, "released")
            raise Exit(X.EXIT0, "released")
        await self.close(CC.RELEASED, "4005 released")
        raise Exit(X.EXIT0, "released")

    async def teardown(self) -> None:
        """Stop executors; outputs are the files the `file` tool wrote (the upload stand-in)."""
        self.go(W.RELEASING)
        for t in list(self.active_calls.values()):
            t.cancel()
        if self.active_calls:
            await asyncio.wait(list(self.active_calls.values()), timeout=5)

    # --- heartbeats ------------------------------------------------------------------

    async def heartbeats(self) -> None:
        """A heartbeat every interval, answered or not (heartbeatMissedMax: three may go
        unanswered); the first left unanswered for the grace loses the channel (T-67)."""
        interval = self.budget("heartbeatIntervalSeconds", tc.HEARTBEAT_INTERVAL_SECONDS)
        grace = self.budget("heartbeatGraceSeconds", tc.HEARTBEAT_GRACE_SECONDS)
        if self.a.brk == "slow-heartbeat":
            log("--break slow-heartbeat: a heartbeat every three intervals")
            interval *= 3
        beats: set[asyncio.Task[bool]] = set()
        loop = asyncio.get_running_loop()
        due = loop.time() + interval  # the first one an interval after entering serving (T-8)
        try:
            while True:
                left = max(0.0, due - loop.time())
                done: set[asyncio.Task[bool]] = set()
                if beats:
                    done, _ = await asyncio.wait(beats, timeout=left)
                else:
                    await asyncio.sleep(left)
                for t in done:
                    beats.discard(t)
                    if not t.result():
                        return
                if loop.time() >= due:
                    if self.state is not W.SERVING:
                        return
                    beats.add(loop.create_task(self.beat(grace)))
                    due = loop.time() + interval
        finally:
            for t in beats:
                t.cancel()

    async def beat(self, grace: float) -> bool:
        """One heartbeat and its answer; whether the channel goes on."""
        now = time.monotonic()
        params = tc.HeartbeatParams(
            session_id=self.session_id,
            idle_seconds=int(now - self.last_call_done),
            exec_seconds=int(now - self.started),
            active_tool_calls=len(self.active_calls),
            workspace_bytes=workspace_bytes(self.workspace),
            channel_version=CHANNEL_VERSION if self.a.brk == "own-version" else self.effective,
        )
        try:
            ans = await self.request("agentfy/heartbeat", params, tc.HeartbeatParams, grace)
        except asyncio.TimeoutError:
            log(f"heartbeat unanswered for {grace}s: channel lost")
            await self.close(CC.GOING_AWAY, "heartbeat unanswered")
            return False
        if isinstance(ans, tc.JsonRpcErrorResponse):
            log(f"heartbeat refused {ans.error.code} {ans.error.message}; waiting for the host's close")
            return True
        try:
            res = convert(tc.HeartbeatResult, ans.result)
        except tc.DecodeFailure as e:
            log(f"heartbeat result malformed ({e.label}); ignored")
            return True
        # Budgets can only be lowered (T-17): a larger value is ignored.
        if self.idle_budget is not None:
            self.idle_budget = min(self.idle_budget, res.idle_budget_seconds)
        if self.exec_budget is not None:
            self.exec_budget = min(self.exec_budget, res.exec_budget_seconds)
        if not res.continue_ and self.a.brk == "ignore-stop":
            log("--break ignore-stop: heartbeat said continue: false, serving on")
        elif not res.continue_:
            log("heartbeat said continue: false -> tearing down as if released")
            await self.teardown()
            await self.close(CC.RELEASED, "4005 wind down")
            return False
        if self.exec_budget is not None and time.monotonic() - self.started >= self.exec_budget:
            log("own exec ceiling reached -> tearing down")
            await self.teardown()
            await self.close(CC.RELEASED, "4005 exec ceiling")
            return False
        return True

    # --- the process -----------------------------------------------------------------

    async def run(self) -> int:
        window = float(self.env_budgets.get("reconnectWindowSeconds", tc.RECONNECT_WINDOW_SECONDS))
        lost_at: Optional[float] = None  # when the channel was deemed lost; None while healthy
        delay = tc.RECONNECT_BACKOFF_INITIAL_SECONDS
        loop = asyncio.get_running_loop()
        while True:
            why = ""
            try:
                await self.connection()
                why = "socket ended"
            except Exit as e:
                log(f"exit {e.code}: {e}")
                if self.state is not W.EXITED:
                    self.go(W.EXITED)
                return e.code
            except Lost as e:
                why = str(e)
            except (OSError, asyncio.TimeoutError) as e:
                why = f"dial failed: {e!r}"  # a failing dial uses the same window and backoff (T-54)
            now = loop.time()
            if self.recovered:
                # a fresh initialize succeeded since the last loss: a new loss starts a new window
                lost_at, delay, self.recovered = None, tc.RECONNECT_BACKOFF_INITIAL_SECONDS, False
            if lost_at is None:
                lost_at = now
            if self.budgets:
                window = self.budget("reconnectWindowSeconds", window)
            if self.state is not W.RECONNECTING:
                self.go(W.RECONNECTING)
            left = window - (now - lost_at)
            if left <= 0:
                self.go(W.EXITED)
                log(f"{why}; reconnect window ({window:g}s) expired; uploading what is possible; exit 75")
                return X.EX_TEMPFAIL
            log(f"channel lost ({why}); redial in {min(delay, left):g}s")
            await asyncio.sleep(min(delay, left))
            delay = min(delay * tc.RECONNECT_BACKOFF_FACTOR, tc.RECONNECT_BACKOFF_MAX_SECONDS)
            if self.ws is not None and self.a.brk == "same-attempt":
                log("--break same-attempt: redialling with the last socket's attempt")
            elif self.ws is not None:
                self.attempt += 1  # +1 on each redial once a socket of this process had opened
                self.ws = None


# --- tools --------------------------------------------------------------------------


class ToolError(Exception):
    pass


def workspace_bytes(root: str) -> int:
    total = 0
    for d, _, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return total


async def tool_echo(_w: Worker, args: dict[str, Any]) -> str:
    text = args.get("text")
    if not isinstance(text, str):
        raise ToolError("echo: `text` must be a string")
    return text


async def tool_file(w: Worker, args: dict[str, Any]) -> str:
    op, path = args.get("op"), args.get("path")
    if op not in ("write", "read") or not isinstance(path, str) or not path:
        raise ToolError("file: `op` must be write|read and `path` a non-empty string")
    full = os.path.realpath(os.path.join(w.workspace, path))
    if os.path.commonpath([full, os.path.realpath(w.workspace)]) != os.path.realpath(w.workspace):
        raise ToolError("file: path escapes the workspace")
    if op == "write":
        content = args.get("content", "")
        if not isinstance(content, str):
            raise ToolError("file: `content` must be a string")
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(content)
        rel = os.path.relpath(full, os.path.realpath(w.workspace))
        if rel not in w.outputs:
            w.outputs.append(rel)
        return f"wrote {len(content.encode())} bytes to {rel}"
    try:
        with open(full, encoding="utf-8") as f:
            return f.read(1 << 20)
    except OSError as e:
        raise ToolError(f"file: {e.strerror}") from None


TOOLS: dict[str, dict[str, Any]] = {
    "echo": {
        "run": tool_echo,
        "tool": tc.Tool(
            name="echo",
            description="Return the given text.",
            input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        ),
    },
    "file": {
        "run": tool_file,
        "tool": tc.Tool(
            name="file",
            description="Write or read a UTF-8 file inside the workspace; written files are the session's outputs.",
            input_schema={
                "type": "object",
                "properties": {
                    "op": {"enum": ["write", "read"]},
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                },
                "required": ["op", "path"],
            },
        ),
    },
}


def main() -> int:
    ap = argparse.ArgumentParser(description="toolchannel reference worker (SDK-based).")
    ap.add_argument("--url", default=os.environ.get("CONTROL_URL"), help="host URL (env CONTROL_URL)")
    ap.add_argument("--token", help="Bearer token (or env WORKER_TOKEN)")
    ap.add_argument("--token-file", help="file holding the token (or env WORKER_TOKEN_FILE)")
    ap.add_argument("--session-id", default=os.environ.get("SESSION_ID"), help="own SESSION_ID (env SESSION_ID)")
    ap.add_argument("--instance-id", help="instanceId (default: issued once at start)")
    ap.add_argument("--attempt", type=int, default=0, help="attempt of the first dial (default 0; tests only)")
    ap.add_argument("--tools", default=os.environ.get("TOOL_ALLOWLIST", "echo,file"), help="allowlist (env TOOL_ALLOWLIST)")
    ap.add_argument("--workspace", default=os.environ.get("WORKSPACE", "./workspace"), help="workspace directory")
    ap.add_argument("--budgets", default=os.environ.get("AGENTFY_BUDGETS"),
                    help="environment budgets as JSON (env AGENTFY_BUDGETS); the smaller of these and the frame wins")
    ap.add_argument("--break", dest="brk", choices=["early-ready", "echo-version", "ask-roots", "slow-heartbeat", "release-close", "ignore-stop", "no-token", "same-attempt", "drain-exits", "echo-session", "own-version"], help="break one rule on purpose")
    a = ap.parse_args()
    token_env, file_env = os.environ.get("WORKER_TOKEN"), os.environ.get("WORKER_TOKEN_FILE")
    if token_env and file_env:
        log("WORKER_TOKEN and WORKER_TOKEN_FILE are both set: refusing to start (exit 78)")
        return X.EX_CONFIG
    token = a.token or token_env
    tfile = a.token_file or file_env
    if tfile and not token:
        try:
            with open(tfile, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            log(f"cannot read the token file: {e.strerror} (exit 78)")
            return X.EX_CONFIG
    if not a.url or not token or not a.session_id:
        ap.error("--url, a token and --session-id are required")
    if a.budgets:
        try:
            b = json.loads(a.budgets)
            assert isinstance(b, dict) and all(k in BUDGET_KEYS and isinstance(v, int) and v >= 1 for k, v in b.items())
        except (ValueError, AssertionError):
            log(f"--budgets must be a JSON object of {BUDGET_KEYS} to integers >= 1 (exit 78)")
            return X.EX_CONFIG
    try:
        return int(asyncio.run(Worker(a, token).run()))
    except KeyboardInterrupt:
        return X.EX_TEMPFAIL


if __name__ == "__main__":
    sys.exit(main())
