"""Reference rukh extension in Python (issue 8), built on the generated SDK.

Run it from a rukh core: the control channel is the inherited fd given by
``--fd``, else ``$RUKH_IPC_FD``, else 3 (the convention ``rukh-core`` and the
proxy's ``exec-fd:3`` use; contract note R-2 leaves it to the adapter). The
SDK package ``contract_sdk`` comes from ``contractgen generate --lang python``
(run.sh puts it on PYTHONPATH); every frame goes through its framing
(``read_ipc_frame_async``/``write_ipc_frame_async``, which hold a begun frame to
the 2 s ``incompleteFrameSeconds``) and types (``decode_ipc_message``, which
applies the channel's strict JSON profile, depth and item caps and the
lifecycle methods' own 16 KiB cap; ``InitializeParams``, ``InvokeResult`` …).

Behaviour matches the Rust extension (ext-rust): rukh.initialize echoes the
pinned context (or -32003 for an unsupported capability); one rukh.invoke runs
``rukh.log`` then ``rukh.call demo.echo`` and ``rukh.call demo.clock``; inputs
``{"exit": N}`` complete command_failed and exit N, ``{"sleepMs": N}`` work that
long (cancellable); rukh.cancel/rukh.close are acknowledged, then the end is
closed. The core's ids must be c:1, c:2, … (R-10); only rukh.initialize is
accepted before the handshake (-32001, R-38).

Protocol errors end the session without a response and exit 125: a frame the
strict profile refuses (duplicate key, unsafe integer, depth, items …), a frame
over the channel's cap or its method's cap (R-4), a frame begun and not
finished within the frame deadline (P3.5), a method the core may not send
(violations.wrongDirection, e.g. rukh.call). The one exception the contract
makes: a rukh.log over its cap is dropped and counted (overMaxPayload: ignore,
R-41); this extension only sends logs, so it drops its own over-cap records.
``--break id-gap`` makes the second request skip one counter (e:1 then e:3).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import stat
import sys
from typing import Any, Optional

import msgspec

from contract_sdk import rukh as r

SUPPORTED_CAPS = {"command-result/1"}


class ProtocolError(Exception):
    """The session broke a rule: no action, no response, the channel ends."""


class Extension:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, brk: Optional[str]) -> None:
        self.reader = reader
        self.writer = writer
        self.brk = brk
        self.initialized = False
        self.completed = False
        self.core_next = 1
        self.next_id = 1
        self.sent_requests = 0
        self.session_id = ""
        self.invocation_id = ""
        self.kind = ""
        self.invoke_id: Optional[str] = None
        self.inputs: dict[str, Any] = {}
        self.awaiting: Optional[tuple[str, str]] = None  # (step, request id)
        self.exit_code = 0
        self.sleep_task: Optional[asyncio.Task[None]] = None
        self.sent: dict[str, str] = {}  # our request id -> its method, until answered
        self.dropped_logs = 0

    # --- sending (all through the SDK's types and framing) -------------------

    async def send(self, msg: Any, answers: Optional[str] = None) -> None:
        """Send one message; ``answers`` is the method of the request a reply answers.

        Our own frames hold to the channel's rules too: a reply over its method's cap
        or a request over its own raises (an SDK ContractError ends the session)."""
        data = r.encode(msg)
        r.decode_ipc_message(data, answers=lambda _id: answers)
        await r.write_ipc_frame_async(self.writer, data)

    async def reply(self, req: r.Request, result: Any) -> None:
        await self.send(r.SuccessResponse(jsonrpc="2.0", id=req.id, result=msgspec.to_builtins(result)), req.method)

    async def error(self, req: r.Request, code: r.ErrorCode, message: str, detail: Optional[str] = None,
                    reason: Optional[r.ProtocolErrorReason] = None) -> None:
        data = msgspec.UNSET
        if detail is not None or reason is not None:
            data = r.ErrorData(detail=detail if detail is not None else msgspec.UNSET,
                               reason=reason if reason is not None else msgspec.UNSET)
        err = r.ErrorResponse(jsonrpc="2.0", id=req.id, error=r.JsonRpcError(code=int(code), message=message, data=data))
        await self.send(err, req.method)

    def next_request_id(self) -> str:
        self.sent_requests += 1
        if self.brk == "id-gap" and self.sent_requests == 2:
            print(f"rukh-ext.py: --break id-gap: skipping e:{self.next_id}", file=sys.stderr)
            self.next_id += 1
        rid = f"e:{self.next_id}"
        self.next_id += 1
        return rid

    async def call(self, step: str, operation: str, input_: dict[str, Any]) -> None:
        rid = self.next_request_id()
        params = r.CallParams(operation=operation, version="1", input=input_, session_id=self.session_id,
                              invocation_id=self.invocation_id)
        await self.send(r.Request(jsonrpc="2.0", id=rid, method="rukh.call", params=msgspec.to_builtins(params)))
        self.sent[rid] = "rukh.call"
        self.awaiting = (step, rid)

    async def log(self, level: str, message: str) -> None:
        params = r.LogParams(level=r.LogLevel(level), message=message)
        try:
            await self.send(r.Notification(jsonrpc="2.0", method="rukh.log", params=msgspec.to_builtins(params)))
        except r.MethodFrameTooLarge as e:
            if not e.ignore:
                raise
            self.dropped_logs += 1
            print(f"rukh-ext.py: log record dropped ({self.dropped_logs} so far): {e}", file=sys.stderr)

    # --- the invocation ---------------------------------------------------------

    async def complete(self) -> None:
        assert self.invoke_id is not None
        result: Any
        code = self.inputs.get("exit")
        if self.kind == "describe":
            result = r.SucceededCompletion(help={"summary": "Echo the inputs through core operations"})
        elif isinstance(code, int) and code != 0:
            self.exit_code = code
            result = r.CommandFailedCompletion(exit_code=code, message="asked to fail")
        else:
            result = r.SucceededCompletion(summary="echoed")
        await self.send(r.SuccessResponse(jsonrpc="2.0", id=self.invoke_id, result=msgspec.to_builtins(result)), "rukh.invoke")
        self.completed = True

    async def finish_or_sleep(self) -> None:
        ms = self.inputs.get("sleepMs")
        if isinstance(ms, int) and ms > 0:
            async def later() -> None:
                await asyncio.sleep(ms / 1000)
                await self.complete()
            self.sleep_task = asyncio.create_task(later())
        else:
            await self.complete()

    def check_core_id(self, id_: Any) -> None:
        expected = f"c:{self.core_next}"
        if id_ != expected:
            raise ProtocolError(f"request_id_violation: core id {id_!r}, expected {expected}")
        self.core_next += 1

    @staticmethod
    def check_direction(method: str) -> None:
        """A method of the contract the core may not send ends the session (wrongDirection: fail)."""
        info = r.METHODS.get(method)
        if info is not None and "core" not in info.senders:
            raise ProtocolError(f"wrong_direction: {method} is sent by {'/'.join(info.senders)}, not the core")

    async def on_request(self, req: r.Request) -> Optional[int]:
        self.check_direction(req.method)
        self.check_core_id(req.id)
        raw_params = req.params if req.params is not msgspec.UNSET else {}
        if not self.initialized and req.method != "rukh.initialize":
            await self.error(req, r.ErrorCode.NOT_INITIALIZED, "not initialized", req.method)
            raise ProtocolError(f"state_violation: {req.method} before rukh.initialize")
        if req.method == "rukh.initialize":
            p = msgspec.convert(raw_params, r.InitializeParams)
            bad = [c for c in p.capabilities if c not in SUPPORTED_CAPS]
            if bad:
                await self.error(req, r.ErrorCode.INCOMPATIBLE_SESSION, "capability not supported", bad[0])
                return 125
            self.session_id, self.kind = p.session_id, p.kind.value
            self.invocation_id = p.invocation_id
            res = r.InitializeResult(session_id=p.session_id, contract=p.contract, protocol=p.protocol,
                                     capabilities=p.capabilities, adapter=r.AdapterInfo(name="rukh-ext-python", version="0.1.0"))
            await self.reply(req, res)
            self.initialized = True
        elif req.method == "rukh.invoke":
            if self.invoke_id is not None:
                await self.error(req, r.ErrorCode.ALREADY_INVOKED, "session already invoked")
                return None
            inv = msgspec.convert(raw_params, r.InvokeParams)
            kind = "execute" if isinstance(inv, r.ExecuteInvocation) else "describe"
            if kind != self.kind:
                # The kind is an agreement: -32000 context_mismatch, then the end.
                await self.error(req, r.ErrorCode.PROTOCOL_ERROR, "invoke of another kind",
                                 reason=r.ProtocolErrorReason.CONTEXT_MISMATCH)
                raise ProtocolError(f"context_mismatch: invoke kind {kind}, pinned {self.kind}")
            self.invoke_id = req.id
            self.inputs = dict(inv.inputs) if isinstance(inv, r.ExecuteInvocation) else {}
            if kind == "describe":
                await self.finish_or_sleep()
            else:
                await self.log("info", "demo command started")
                await self.call("echo", "demo.echo", self.inputs)
        elif req.method == "rukh.ui.event" and self.completed:
            # After the completion no new UI request is accepted.
            await self.error(req, r.ErrorCode.SESSION_CLOSING, "session closing")
        elif req.method == "rukh.ui.event":
            ev = msgspec.convert(raw_params, r.UiEventParams)
            await self.reply(req, r.UiEventResult(sequence=ev.sequence))
        elif req.method == "rukh.cancel":
            c = msgspec.convert(raw_params, r.CancelParams)
            print(f"rukh-ext.py: cancelled ({c.reason.value})", file=sys.stderr)
            if self.sleep_task is not None:
                self.sleep_task.cancel()
            await self.reply(req, r.Ack())
            return 130
        elif req.method == "rukh.close":
            msgspec.convert(raw_params, r.CloseParams)
            await self.reply(req, r.Ack())
            return self.exit_code
        else:
            await self.error(req, r.ErrorCode.METHOD_NOT_FOUND, "method not found")
        return None

    async def on_response(self, resp: Any) -> None:
        if self.awaiting is None or resp.id != self.awaiting[1]:
            raise ProtocolError(f"unknown_response_id {resp.id!r}")
        step = self.awaiting[0]
        self.awaiting = None
        self.sent.pop(resp.id, None)
        if step == "echo":
            await self.call("clock", "demo.clock", {})
        else:
            await self.finish_or_sleep()

    def answers(self, id_: Any) -> Optional[str]:
        """The method of our request a reply answers (for its method's cap)."""
        return self.sent.get(id_) if isinstance(id_, str) else None

    async def serve(self) -> int:
        while True:
            try:
                frame = await r.read_ipc_frame_async(self.reader)
            except r.FrameIncomplete as e:
                raise ProtocolError(f"incomplete_frame: {e}") from e
            except r.FrameTooLarge as e:
                raise ProtocolError(f"oversize_frame: {e}") from e
            if frame is None:
                raise ProtocolError("early EOF: the core closed the channel")
            try:
                msg = r.decode_ipc_message(frame, answers=self.answers)
            except r.MethodFrameTooLarge as e:
                if e.ignore:
                    # Dropped and counted (overMaxPayload: ignore) — if the core may send it at all.
                    self.check_direction(e.method)
                    self.dropped_logs += 1
                    print(f"rukh-ext.py: dropped ({self.dropped_logs} so far): {e}", file=sys.stderr)
                    continue
                raise ProtocolError(f"oversize_frame: {e}") from e
            except r.DecodeFailure as e:
                rule = f"/{e.rule}" if e.rule else ""
                raise ProtocolError(f"invalid frame ({e.label}{rule}): {e}") from e
            if isinstance(msg, r.Request):
                try:
                    code = await self.on_request(msg)
                except msgspec.ValidationError as e:
                    # Params that fail their schema are answered without running the
                    # handler, and the session goes on.
                    await self.error(msg, r.ErrorCode.INVALID_PARAMS, str(e))
                    continue
                if code is not None:
                    return code
            elif isinstance(msg, (r.SuccessResponse, r.ErrorResponse)):
                await self.on_response(msg)
            else:
                # Unknown notifications are ignored; known ones the core may not send fail.
                self.check_direction(msg.method)


def control_socket(fd: int) -> socket.socket:
    """The inherited control end, made non-inheritable before any handler runs."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        raise SystemExit(f"rukh-ext.py: fd {fd} is not open: launch me from a rukh core ({e})")
    if not stat.S_ISSOCK(mode):
        raise SystemExit(f"rukh-ext.py: fd {fd} is not a socket")
    os.set_inheritable(fd, False)
    return socket.socket(fileno=fd)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fd", type=int, default=int(os.environ.get("RUKH_IPC_FD", "3")))
    ap.add_argument("--break", dest="brk", choices=["id-gap"])
    args = ap.parse_args()
    sock = control_socket(args.fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=r.FRAME_PAYLOAD_MAX + 4)
    ext = Extension(reader, writer, args.brk)
    try:
        code = await ext.serve()
    except ProtocolError as e:
        print(f"rukh-ext.py: protocol_error: {e}", file=sys.stderr)
        code = 125
    except (r.ContractError, ConnectionError) as e:
        print(f"rukh-ext.py: channel failed: {e}", file=sys.stderr)
        code = 125
    # The ack was written completely (drain); now close our end and exit.
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), timeout=2)
    except (asyncio.TimeoutError, ConnectionError):
        pass
    return code


if __name__ == "__main__":
    sys.exit(asyncio.run(main()) & 0xFF)
