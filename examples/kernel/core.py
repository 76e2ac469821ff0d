#!/usr/bin/env python3
"""Reference kernel core (Python), written on the generated SDK `contract_sdk.kernel`.

The core is the kernel protocol's client: it dials the shell's control channel,
then its data channel (K-1), answers `hello`, and serves a small scripted set of
skills through `command.handle` (see README.md for the phrase table). Every
message, frame, error code, limit and state machine comes from the generated
SDK; nothing here spells a wire struct or a frame layout by hand.

It also understands the conformance suite's triggers (docs/conformance.md):
`conformance:speak N`, `conformance:stream`, `conformance:task N` and
`conformance:power-off`, so `contract-proxy conformance --play shell` can drive it.

usage: core.py --control EP --data EP [--session ID] [--ttl S] [--break credit] [--sdk DIR]
  EP is unix:PATH or tcp:HOST:PORT. Exit: 0 when the shell closed the channel,
  1 on a connect/IO failure, 3 when the shell was declared dead (§13).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
DEFAULT_SDK = HERE.parent.parent / "target" / "examples-sdk" / "python" / "kernel"

# Imported after --sdk is known (see main()).
k: Any = None
msgspec: Any = None

CORE_VERSIONS = [1]
CORE_VERSION = "4.0.0-ref"
# What this core really serves: streamed text (llm) and synthesized audio (tts).
CORE_CAPABILITIES = ["llm", "tts"]

# The scripted answers; the C# reference shell checks them word for word.
STREAM_TEXT = ["Столица ", "Австралии — ", "Канберра."]
PROGRAMS_QUERY = "телеграм"
# Synthesized speech: 1.5 s of 16 kHz mono pcm_s16le, a deterministic byte pattern.
SPEECH_RATE = 16000
SPEECH_BYTES = 48000
SPEECH_FRAME_MAX = 4096
SHORT_TASK_STEPS = 3
STEP_SECONDS = 0.2
# Bytes per second of 16 kHz mono pcm_s16le (conformance:speak N sends N seconds of it).
PCM_BYTES_PER_SECOND = SPEECH_RATE * 2
# Longest N a conformance trigger accepts: a typo must not start an hour-long stream.
TRIGGER_MAX_SECONDS = 600
# The one dangerous tool and the arguments its confirmation is bound to (§11, 4.0-C05).
POWER_FINGERPRINT = "power_action:shutdown"
CONNECT_DEADLINE = 15.0
CREDIT_WAIT_DEADLINE = 30.0
# stream.close travels on the control channel, the frames on the data channel: nothing orders
# the two (K-3: late frames race with stream.close). The sender lets its last frames get ahead.
CLOSE_GRACE_SECONDS = 0.25


def speech_byte(i: int) -> int:
    """The pattern both reference peers know: byte i of the synthesized stream."""
    return (i * 7 + 3) & 0xFF


def log(msg: str) -> None:
    print(f"core: {msg}", file=sys.stderr, flush=True)


def now() -> float:
    return round(time.time(), 3)


async def dial(ep: str, deadline: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to unix:PATH or tcp:HOST:PORT, retrying until `deadline` (monotonic)."""
    last: Optional[BaseException] = None
    while time.monotonic() < deadline:
        try:
            if ep.startswith("unix:"):
                return await asyncio.wait_for(asyncio.open_unix_connection(ep[5:]), 5.0)
            if ep.startswith("tcp:"):
                host, _, port = ep[4:].rpartition(":")
                return await asyncio.wait_for(asyncio.open_connection(host or "127.0.0.1", int(port)), 5.0)
            raise SystemExit(f"core: bad endpoint {ep!r} (want unix:PATH or tcp:HOST:PORT)")
        except (OSError, asyncio.TimeoutError) as e:
            last = e
            await asyncio.sleep(0.05)
    raise ConnectionError(f"cannot connect to {ep}: {last}")


class Stream:
    """One binary stream this core sends, with the credit its receiver granted."""

    def __init__(self, sid: int, trace: str) -> None:
        self.sid = sid
        self.trace = trace
        self.state = k.BINARY_STREAM_STATE_INITIAL
        self.credit = k.INITIAL_CREDIT_BYTES
        self.granted_once = asyncio.Event()
        self.changed = asyncio.Event()

    def move(self, new: Any) -> None:
        if self.state != new:
            k.check_binary_stream_transition(self.state, new)
            self.state = new


class Task:
    """One long task (state machine `task`)."""

    def __init__(self, tid: str, trace: str) -> None:
        self.tid = tid
        self.trace = trace
        self.state = k.TASK_STATE_INITIAL
        self.runner: Optional[asyncio.Task[None]] = None

    def move(self, new: Any) -> None:
        k.check_task_transition(self.state, new)
        self.state = new


class Confirmation:
    """A single-use confirmation the core issues itself after a yes (§11). It never leaves
    the core: only its effect (the tool runs once) is visible on the wire."""

    def __init__(self, fingerprint: str, ttl: float) -> None:
        self.fingerprint = fingerprint
        self.expires = time.monotonic() + ttl
        self.used = False


class Core:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.break_credit = args.break_rule == "credit"
        self.ids = itertools.count(1)
        self.state = k.SESSION_STATE_INITIAL
        self.version = 1  # bootstrap v of the hello exchange (K-7)
        self.shell_caps: set[str] = set()
        self.pending: dict[str, asyncio.Future[Any]] = {}
        # The shell's request ids, checked by its rules in the contract (unique, K-5).
        self.shell_ids = k._rt.IdCounter()
        self.streams: dict[int, Stream] = {}
        self.text_streams: dict[int, asyncio.Task[None]] = {}
        self.tasks: dict[str, Task] = {}
        self.next_stream = itertools.count(7)  # one session-wide namespace (K-9)
        self.next_task = itertools.count(1)
        self.last_rx = time.monotonic()
        self.ping_out: Optional[tuple[str, float]] = None
        self.missed = 0
        self.exit_code = 0
        self.done = asyncio.Event()
        self.cw: Any = None
        self.dw: Any = None
        self.background: set[asyncio.Task[Any]] = set()
        self.confirmations: dict[str, Confirmation] = {}

    # --- sending -----------------------------------------------------------------

    def new_id(self) -> str:
        return f"c-{next(self.ids):04d}"

    @staticmethod
    def payload(obj: Any) -> dict[str, Any]:
        """A typed SDK struct as the envelope's payload object."""
        return msgspec.json.decode(k.encode(obj))

    async def send(self, msg: Any) -> None:
        if self.cw is None or self.cw.is_closing():
            return
        try:
            await k.write_control_frame_async(self.cw, k.encode(msg))
        except (ConnectionError, OSError) as e:
            log(f"control write failed: {e}")
            self.done.set()

    async def respond(self, req: Any, result: Any, v: Optional[int] = None) -> None:
        await self.send(k.ResponseMessage(v=v or self.version, id=self.new_id(), timestamp=now(),
                                          trace_id=req.trace_id, correlation_id=req.id,
                                          payload=self.payload(result)))

    async def error(self, code: Any, message: str, *, trace: Optional[str] = None,
                    correlation: Optional[str] = None, stream_id: Optional[int] = None,
                    details: Any = None, v: Optional[int] = None) -> None:
        body = k.ErrorBody(code=code.value, category=k.ErrorCategory(code.category),
                           retryable=code.retryable, message=message)
        if details is not None:
            body.details = details
        msg = k.ErrorMessage(v=v or self.version, id=self.new_id(), timestamp=now(),
                             trace_id=trace or f"t-{uuid.uuid4().hex[:8]}", payload=body)
        if correlation is not None:
            msg.correlation_id = correlation
        if stream_id is not None:
            msg.stream_id = stream_id
        await self.send(msg)

    async def event(self, method: str, trace: str, params: Any = None, *,
                    stream_id: Optional[int] = None, correlation: Optional[str] = None) -> None:
        msg = k.EventMessage(v=self.version, id=self.new_id(), timestamp=now(), trace_id=trace,
                             method=method, payload={} if params is None else self.payload(params))
        if stream_id is not None:
            msg.stream_id = stream_id
        if correlation is not None:
            msg.correlation_id = correlation
        await self.send(msg)

    async def request(self, method: str, trace: str, params: Any, timeout: float) -> Any:
        """Send a core→shell request; the shell's response or error message, or None on timeout."""
        rid = self.new_id()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        await self.send(k.RequestMessage(v=self.version, id=rid, timestamp=now(), trace_id=trace,
                                         method=method, payload=self.payload(params)))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self.pending.pop(rid, None)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        t = asyncio.ensure_future(coro)
        self.background.add(t)
        t.add_done_callback(self.background.discard)
        return t

    # --- receiving ---------------------------------------------------------------

    async def control_loop(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                frame = await k.read_control_frame_async(reader)
            except k.FrameTooLarge as e:
                # Skip the declared bytes unread, then report without correlation_id (K-2).
                left = e.length
                try:
                    while left > 0:
                        left -= len(await reader.readexactly(min(left, 65536)))
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                await self.error(k.ErrorCode.PROTOCOL_FRAME_TOO_LARGE,
                                 f"Кадр в {e.length} байт больше предела {e.cap}.",
                                 details=k.ErrorDetails(length=e.length))
                continue
            except (k.FrameError, ConnectionError, asyncio.IncompleteReadError) as e:
                log(f"control channel broken: {e}")
                break
            if frame is None:
                log("shell closed the control channel: exiting (§13)")
                break
            self.last_rx = time.monotonic()
            self.ping_out = None
            self.missed = 0
            await self.on_frame(frame)
        self.done.set()

    def envelope_fields(self, raw: Any, failure: Any) -> list[str]:
        """Mandatory envelope members (per the SDK struct of the message's type) that are
        missing, else the member the decoder refused."""
        if not isinstance(raw, dict):
            return []
        branches = {"request": k.RequestMessage, "response": k.ResponseMessage,
                    "event": k.EventMessage, "error": k.ErrorMessage}
        cls = branches.get(raw.get("type")) if isinstance(raw.get("type"), str) else None
        if cls is None:
            return ["type"]
        missing = [f.encode_name for f in msgspec.structs.fields(cls)
                   if f.required and f.encode_name not in raw]
        if missing:
            return missing
        path = getattr(failure, "path", "$")
        first = path[2:].split(".")[0].split("[")[0] if path.startswith("$.") else ""
        return [first] if first else []

    async def on_frame(self, frame: bytes) -> None:
        try:
            raw = msgspec.json.decode(frame)
        except msgspec.DecodeError:
            raw = None
        try:
            msg = k.decode_control_message(frame)
        except k.DecodeFailure as f:
            rid = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
            trace = raw.get("trace_id") if isinstance(raw, dict) and isinstance(raw.get("trace_id"), str) else None
            fields = self.envelope_fields(raw, f)
            log(f"invalid envelope {rid}: {f} (fields {fields})")
            await self.error(k.ErrorCode.PROTOCOL_INVALID_ENVELOPE,
                             f"Неверный конверт сообщения: {f.detail}", trace=trace, correlation=rid,
                             details=k.ErrorDetails(fields=fields))
            return
        kind = type(msg).__name__
        method = getattr(msg, "method", None)
        log(f"<- {kind[:-7].lower()} {method or ''} {msg.id} trace={msg.trace_id}")
        if await self.id_broken(msg):
            return
        if self.state != k.SessionState.READY:
            if isinstance(msg, k.RequestMessage) and msg.method == "hello" \
                    and self.state == k.SessionState.AWAITING_HELLO:
                await self.hello(msg)
            else:
                # Anything else before a successful handshake (K-32), also after incompatible (K-16).
                await self.error(k.ErrorCode.PROTOCOL_NOT_READY,
                                 "Сначала нужно рукопожатие hello.", trace=msg.trace_id,
                                 correlation=msg.id, v=1,
                                 details=k.ErrorDetails(method=method) if method else None)
            return
        if msg.v != self.version:
            await self.error(k.ErrorCode.PROTOCOL_INVALID_ENVELOPE,
                             f"v={msg.v}, согласована версия {self.version}.", trace=msg.trace_id,
                             correlation=msg.id, details=k.ErrorDetails(fields=["v"]))
            return
        if isinstance(msg, (k.ResponseMessage, k.ErrorMessage)):
            cid = getattr(msg, "correlation_id", msgspec.UNSET)
            fut = self.pending.get(cid) if isinstance(cid, str) else None
            if fut is not None and not fut.done():
                fut.set_result(msg)
            elif isinstance(msg, k.ErrorMessage):
                log(f"shell reported {msg.payload.code}: {msg.payload.message}")
                sid = msg.stream_id
                if isinstance(sid, int) and sid in self.streams:
                    self.close_stream(sid)
            return
        if isinstance(msg, k.EventMessage):
            await self.on_event(msg)
            return
        await self.on_request(msg)

    async def hello(self, msg: Any) -> None:
        try:
            params = k.decode(k.HelloParams, msgspec.json.encode(msg.payload))
        except k.DecodeFailure as f:
            await self.error(k.ErrorCode.PROTOCOL_INVALID_PAYLOAD, f"hello: {f.detail}",
                             trace=msg.trace_id, correlation=msg.id, v=1,
                             details=k.ErrorDetails(fields=[f.path]))
            return
        common = set(params.protocol_versions) & set(CORE_VERSIONS)
        if not common:
            k.check_session_transition(self.state, k.SessionState.INCOMPATIBLE)
            self.state = k.SessionState.INCOMPATIBLE
            await self.error(k.ErrorCode.PROTOCOL_INCOMPATIBLE,
                             f"Оболочка знает версии протокола {sorted(params.protocol_versions)}, "
                             f"ядро — {CORE_VERSIONS}: общих нет. Обновите оболочку или ядро.",
                             trace=msg.trace_id, correlation=msg.id, v=1,
                             details=k.ErrorDetails(shell_versions=list(params.protocol_versions),
                                                    core_versions=CORE_VERSIONS))
            return
        version = max(common)
        self.shell_caps = set(params.capabilities)
        result = k.HelloResult(protocol_versions=CORE_VERSIONS, protocol_version=version,
                               core_version=CORE_VERSION, capabilities=CORE_CAPABILITIES,
                               session_id=uuid.uuid4().hex[:12])
        await self.respond(msg, result, v=1)
        k.check_session_transition(self.state, k.SessionState.READY)
        self.state = k.SessionState.READY
        self.version = version
        log(f"handshake done: v={version}, shell capabilities {sorted(self.shell_caps)}")

    async def on_event(self, msg: Any) -> None:
        if msg.method == "ping":
            await self.event("pong", msg.trace_id, correlation=msg.id)
        elif msg.method == "stream.credit":
            try:
                params = k.decode(k.StreamCreditParams, msgspec.json.encode(msg.payload))
            except k.DecodeFailure as f:
                log(f"ignored invalid stream.credit: {f}")  # invalid event: ignore and log (K-15)
                return
            s = self.streams.get(msg.stream_id) if isinstance(msg.stream_id, int) else None
            if s is None:
                return
            s.credit += params.bytes  # additive (K-10)
            s.granted_once.set()
            s.changed.set()
        elif msg.method == "stream.close":
            sid = msg.stream_id if isinstance(msg.stream_id, int) else None
            if sid in self.streams:
                self.close_stream(sid)
            elif sid in self.text_streams:
                self.text_streams[sid].cancel()
        # pong and unknown events: nothing to do (any message already reset the silence counter).

    async def id_broken(self, msg: Any) -> bool:
        """A request whose id breaks the shell's rules (``ID_RULES``) gets the rules' error."""
        rules = k.ID_RULES.get("shell")
        if rules is None or not isinstance(msg, k.RequestMessage):
            return False
        try:
            self.shell_ids.admit(rules, msg.id)
        except k._rt.IdRuleBroken as e:
            log(f"request id refused: {e}")
            await self.error(k.ErrorCode(rules.code), str(e), trace=msg.trace_id,
                             correlation=msg.id, details=k.ErrorDetails(fields=["id"]))
            return True
        return False

    async def on_request(self, msg: Any) -> None:
        handlers = {"command.handle": self.command, "task.cancel": self.task_cancel,
                    "settings.describe": self.settings}
        h = handlers.get(msg.method)
        if h is None:
            # Unknown, wrong-direction, second hello (K-16), and 4.0's actuation.* (§12).
            await self.error(k.ErrorCode.PROTOCOL_UNKNOWN_METHOD,
                             f"Метод {msg.method} не поддерживается.", trace=msg.trace_id,
                             correlation=msg.id, details=k.ErrorDetails(method=msg.method))
            return
        await h(msg)

    async def params(self, msg: Any, tp: Any) -> Any:
        try:
            return k.decode(tp, msgspec.json.encode(msg.payload))
        except k.DecodeFailure as f:
            field = f.path[2:] if f.path.startswith("$.") else f.path
            if f.label == "missing-field":
                field = f.detail.split("`")[1] if "`" in f.detail else field
            await self.error(k.ErrorCode.PROTOCOL_INVALID_PAYLOAD, f"{msg.method}: {f.detail}",
                             trace=msg.trace_id, correlation=msg.id,
                             details=k.ErrorDetails(fields=[field]))
            return None

    # --- skills ------------------------------------------------------------------

    async def settings(self, msg: Any) -> None:
        await self.respond(msg, k.SettingsDescribeResult(settings={"voice.enabled": True}))

    async def command(self, msg: Any) -> None:
        p = await self.params(msg, k.CommandHandleParams)
        if p is None:
            return
        text = p.text.lower()
        if text.startswith("conformance:"):
            await self.conformance(msg, text)
        elif any(w in text for w in ("запусти", "launch")):
            self.spawn(self.launch(msg, p.text))
        elif any(w in text for w in ("столица", "расскажи", "stream")):
            await self.text_stream(msg)
        elif any(w in text for w in ("скажи", "say")):
            await self.speak(msg)
        elif any(w in text for w in ("выключи", "shutdown")):
            self.spawn(self.power(msg))
        elif any(w in text for w in ("долгая", "long")):
            await self.start_task(msg, steps=None)
        elif any(w in text for w in ("короткая", "short")):
            await self.start_task(msg, steps=SHORT_TASK_STEPS)
        else:
            await self.respond(msg, k.CommandHandleResult(text=f"Не знаю, как выполнить «{p.text}»."))

    async def conformance(self, msg: Any, text: str) -> None:
        """The conformance suite's triggers (docs/conformance.md). N is in seconds."""
        words = text.split()
        verb = words[0]
        try:
            n = int(words[1]) if len(words) > 1 else 1
        except ValueError:
            n = 1
        n = max(1, min(n, TRIGGER_MAX_SECONDS))
        if verb == "conformance:speak":
            await self.speak(msg, n * PCM_BYTES_PER_SECOND)
        elif verb == "conformance:stream":
            await self.text_stream(msg)
        elif verb == "conformance:task":
            await self.start_task(msg, steps=max(1, round(n / STEP_SECONDS)))
        elif verb == "conformance:power-off":
            self.spawn(self.power(msg))
        else:
            await self.respond(msg, k.CommandHandleResult(text=f"Не знаю триггера «{verb}»."))

    async def launch(self, msg: Any, text: str) -> None:
        """Plain answer after asking the shell for its program index (a core→shell request)."""
        query = text.split(maxsplit=1)[1] if " " in text else text
        reply = await self.request("programs.index", msg.trace_id,
                                   k.ProgramsIndexParams(query=query), timeout=10.0)
        programs: list[Any] = []
        if isinstance(reply, k.ResponseMessage):
            try:
                programs = k.decode(k.ProgramsIndexResult, msgspec.json.encode(reply.payload)).programs
            except k.DecodeFailure as f:
                log(f"programs.index answer refused: {f}")
        q = query.lower()
        for prog in programs:
            names = [prog.name.lower()] + [a.lower() for a in (prog.aliases or [])]
            if any(q in n or n in q for n in names):
                await self.respond(msg, k.CommandHandleResult(text=f"Запускаю {prog.name}."))
                return
        await self.error(k.ErrorCode.APP_NOT_FOUND, f"Не нашла программу «{query}».",
                         trace=msg.trace_id, correlation=msg.id, details=k.ErrorDetails(query=query))

    async def text_stream(self, msg: Any) -> None:
        if "llm" not in CORE_CAPABILITIES:
            await self.error(k.ErrorCode.INTERNAL_ERROR, "llm недоступна", trace=msg.trace_id, correlation=msg.id)
            return
        sid = next(self.next_stream)
        await self.respond(msg, k.CommandHandleResult(stream_id=sid))

        async def run() -> None:
            state = k.TEXT_STREAM_STATE_INITIAL
            reason = k.StreamEndReason.DONE
            try:
                for piece in STREAM_TEXT:
                    await asyncio.sleep(0.05)
                    await self.event("stream.chunk", msg.trace_id, k.StreamChunk(text=piece), stream_id=sid)
            except asyncio.CancelledError:
                reason = k.StreamEndReason.CANCELLED
            new = k.TextStreamState(reason.value)
            k.check_text_stream_transition(state, new)
            await self.event("stream.end", msg.trace_id, k.StreamEnd(reason=reason), stream_id=sid)
            self.text_streams.pop(sid, None)

        self.text_streams[sid] = self.spawn(run())

    async def speak(self, msg: Any, nbytes: int = SPEECH_BYTES) -> None:
        if "audio.output" not in self.shell_caps:
            await self.respond(msg, k.CommandHandleResult(text="Оболочка не умеет воспроизводить звук."))
            return
        sid = next(self.next_stream)
        s = Stream(sid, msg.trace_id)
        self.streams[sid] = s
        await self.event("stream.open", msg.trace_id, k.StreamOpenParams(
            kind=k.StreamKind.AUDIO_OUTPUT, stream_id=sid,
            format=k.StreamFormat(encoding=k.AudioEncoding.PCM_S16LE.value, rate=SPEECH_RATE, channels=1)))
        await self.respond(msg, k.CommandHandleResult(text="Привет!"))
        self.spawn(self.send_speech(s, nbytes))

    def close_stream(self, sid: int) -> None:
        s = self.streams.pop(sid, None)
        if s is not None:
            s.move(k.BinaryStreamState.CLOSED)
            s.changed.set()
            s.granted_once.set()

    async def send_speech(self, s: Stream, nbytes: int) -> None:
        # speech_byte has period 256: build one period and repeat it.
        period = bytes(speech_byte(i) for i in range(256))
        data = (period * (nbytes // 256 + 1))[:nbytes]
        sent, seq = 0, 0
        try:
            # Initial credit is 0: nothing may flow before the first stream.credit (§8).
            await asyncio.wait_for(s.granted_once.wait(), CREDIT_WAIT_DEADLINE)
            while sent < len(data) and s.state != k.BinaryStreamState.CLOSED:
                if self.break_credit:
                    # --break credit: ignore the allowance and push the rest at once.
                    n = min(SPEECH_FRAME_MAX, len(data) - sent)
                else:
                    if s.credit <= 0:
                        s.move(k.BinaryStreamState.BLOCKED)
                        s.changed.clear()
                        await asyncio.wait_for(s.changed.wait(), CREDIT_WAIT_DEADLINE)
                        continue
                    s.move(k.BinaryStreamState.CREDITED)
                    n = min(SPEECH_FRAME_MAX, s.credit, len(data) - sent, k.DATA_PAYLOAD_MAX)
                    s.credit -= n
                await k.write_data_frame_async(self.dw, k.DataFrame(s.sid, seq, data[sent:sent + n]))
                sent += n
                seq += 1
        except asyncio.TimeoutError:
            log(f"stream {s.sid}: no credit within {CREDIT_WAIT_DEADLINE}s; closing")
        except (ConnectionError, OSError) as e:
            log(f"stream {s.sid}: data channel broken: {e}")
        log(f"stream {s.sid}: sent {sent} bytes in {seq} frames{' (credit ignored: --break credit)' if self.break_credit else ''}")
        if s.sid in self.streams:
            await asyncio.sleep(CLOSE_GRACE_SECONDS)
        if s.sid in self.streams:
            self.close_stream(s.sid)
            await self.event("stream.close", s.trace, stream_id=s.sid)

    async def power(self, msg: Any) -> None:
        """The dangerous action (system.power / shutdown). The core asks the shell with
        permission.request, and only after a yes within ttl issues itself a single-use
        confirmation and calls the tool with it; confirmation_id never travels (§11)."""
        if "permissions" not in self.shell_caps:
            # Nobody can confirm: the tool refuses a call without a confirmation (K-17, K-18).
            code, text = self.power_action(None)
            await self.error(code, text, trace=msg.trace_id, correlation=msg.id)
            return
        ttl = self.args.ttl
        ask = f"ask-{uuid.uuid4().hex[:6]}"
        state = k.PERMISSION_REQUEST_STATE_INITIAL
        # An answer after ttl finds no pending future and is dropped: a late yes grants nothing (K-19).
        reply = await self.request("permission.request", msg.trace_id, k.PermissionRequestParams(
            request_id=ask, permission=k.PermissionName.SYSTEM_POWER.value, action="shutdown",
            reason="Пользователь сказал «выключи компьютер»",
            preview="Компьютер будет выключен немедленно (демо: ничего не выключается).", ttl=ttl),
            timeout=ttl)
        granted = False
        if reply is None:
            new = k.PermissionRequestState.EXPIRED
        elif isinstance(reply, k.ResponseMessage):
            try:
                res = k.decode(k.PermissionResult, msgspec.json.encode(reply.payload))
                # An answer for another ask is a no (K-18); scope is required with a yes.
                granted = res.granted and res.request_id == ask and res.scope is not msgspec.UNSET
                # system.power is dangerous: until is downgraded to once, flagged in the log only.
                if granted and res.scope == k.PermissionScope.UNTIL:
                    log(f"{ask}: scope until downgraded to once")
            except k.DecodeFailure as f:
                log(f"{ask}: answer refused: {f}")
            new = k.PermissionRequestState.GRANTED_ONCE if granted else k.PermissionRequestState.DENIED
        else:
            new = k.PermissionRequestState.DENIED
        k.check_permission_request_transition(state, new)
        if new == k.PermissionRequestState.EXPIRED:
            await self.error(k.ErrorCode.PERMISSION_EXPIRED, "Время на ответ истекло: выключение отменено.",
                             trace=msg.trace_id, correlation=msg.id)
            return
        if not granted:
            await self.error(k.ErrorCode.PERMISSION_DENIED, "Пользователь не разрешил выключение.",
                             trace=msg.trace_id, correlation=msg.id)
            return
        cid = f"conf-{uuid.uuid4().hex}"
        self.confirmations[cid] = Confirmation(POWER_FINGERPRINT, ttl)
        failure = self.power_action(cid)
        if failure is not None:
            await self.error(failure[0], failure[1], trace=msg.trace_id, correlation=msg.id)
            return
        k.check_permission_request_transition(new, k.PermissionRequestState.CONSUMED)
        await self.respond(msg, k.CommandHandleResult(text="Выключение разрешено (демо: компьютер не выключается)."))

    def power_action(self, confirmation_id: Optional[str]) -> Optional[tuple[Any, str]]:
        """The tool behind the action: runs (returns None) only with a valid, unexpired, unused
        confirmation issued for these arguments; else the error to answer with."""
        if confirmation_id is None:
            return k.ErrorCode.CONFIRMATION_REQUIRED, "Для выключения компьютера нужно подтверждение пользователя."
        c = self.confirmations.get(confirmation_id)
        if c is None or c.fingerprint != POWER_FINGERPRINT:
            return k.ErrorCode.CONFIRMATION_REQUIRED, "Подтверждение не выдано для этого вызова."
        if c.used or time.monotonic() > c.expires:
            return k.ErrorCode.CONFIRMATION_EXPIRED, "Подтверждение истекло или уже использовано."
        c.used = True
        log(f"power_action(shutdown) ran with {confirmation_id[:9]}… (demo: nothing is switched off)")
        return None

    async def start_task(self, msg: Any, steps: Optional[int]) -> None:
        t = Task(f"task-{next(self.next_task)}", msg.trace_id)
        self.tasks[t.tid] = t
        await self.respond(msg, k.CommandHandleResult(task_id=t.tid))
        t.runner = self.spawn(self.run_task(t, steps))

    async def run_task(self, t: Task, steps: Optional[int]) -> None:
        """The long-task stub: progress and partial each step; exactly one final event.
        steps None = the contract's 60-second stub (LONG_TASK_STUB_SECONDS)."""
        total = steps if steps is not None else int(k.LONG_TASK_STUB_SECONDS / STEP_SECONDS)
        t.move(k.TaskState.RUNNING)  # announced by the first task.progress
        try:
            for i in range(total):
                await self.event("task.progress", t.trace, k.TaskProgress(
                    task_id=t.tid, fraction=round(i / total, 4), message=f"шаг {i + 1} из {total}"))
                await self.event("task.partial", t.trace, k.TaskPartial(task_id=t.tid, data={"step": i + 1}))
                await asyncio.sleep(STEP_SECONDS)
        except asyncio.CancelledError:
            t.move(k.TaskState.CANCELLED)
            await self.event("task.cancelled", t.trace, k.TaskCancelled(task_id=t.tid))
            return
        t.move(k.TaskState.DONE)
        await self.event("task.done", t.trace, k.TaskDone(task_id=t.tid, result=f"готово: {total} шагов"))

    async def task_cancel(self, msg: Any) -> None:
        p = await self.params(msg, k.TaskCancelParams)
        if p is None:
            return
        t = self.tasks.get(p.task_id)
        if t is None:
            await self.respond(msg, k.TaskCancelResult(accepted=False, status=k.TaskCancelStatus.UNKNOWN))
            return
        if t.state in (k.TaskState.ACCEPTED, k.TaskState.RUNNING) and t.runner is not None:
            # The receipt goes out first; the actual stop is reported by task.cancelled (§9).
            await self.respond(msg, k.TaskCancelResult(accepted=True, status=k.TaskCancelStatus.RUNNING))
            t.runner.cancel()
            return
        await self.respond(msg, k.TaskCancelResult(accepted=False, status=k.TaskCancelStatus(t.state.value)))

    # --- data channel and liveness -----------------------------------------------

    async def data_loop(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                frame = await k.read_data_frame_async(reader)
            except (k.FrameError, ConnectionError, asyncio.IncompleteReadError) as e:
                log(f"data channel dropped: {e}")  # oversize/short frame drops it (K-3)
                frame = None
            if frame is None:
                for sid in list(self.streams):
                    self.close_stream(sid)  # a data-channel break closes all streams (§8)
                return
            # This core receives no stream; frames for unknown streams are discarded (K-3).

    async def liveness(self) -> None:
        # CONTRACT_TIME_SCALE (set by a test run, honoured by every party) shortens the
        # contract's heartbeat timers; unset, they are the contract's.
        scale = float(os.environ.get("CONTRACT_TIME_SCALE", "1"))
        silence = k.HEARTBEAT_SILENCE_SECONDS * scale
        answer = k.PING_ANSWER_SECONDS * scale
        while not self.done.is_set():
            await asyncio.sleep(0.25)
            if self.state != k.SessionState.READY:
                continue  # no ping before the handshake (K-32)
            t = time.monotonic()
            if self.ping_out is not None:
                if t - self.ping_out[1] < answer:
                    continue
                self.missed += 1
                log(f"ping {self.ping_out[0]} missed ({self.missed}/{k.MISSED_PINGS_DEAD})")
                if self.missed >= k.MISSED_PINGS_DEAD:
                    log("shell is dead: exiting (§13)")
                    self.exit_code = 3
                    self.done.set()
                    return
            elif t - self.last_rx <= silence:
                continue
            pid = self.new_id()
            self.ping_out = (pid, t)
            await self.send(k.EventMessage(v=self.version, id=pid, timestamp=now(),
                                           trace_id=f"t-{uuid.uuid4().hex[:8]}", method="ping", payload={}))

    async def run(self) -> int:
        deadline = time.monotonic() + self.args.connect_timeout
        cr, self.cw = await dial(self.args.control, deadline)
        dr, self.dw = await dial(self.args.data, deadline)  # right after control (K-1)
        log(f"connected: control {self.args.control}, data {self.args.data}, session {self.args.session}")
        self.last_rx = time.monotonic()
        self.spawn(self.control_loop(cr))
        self.spawn(self.data_loop(dr))
        self.spawn(self.liveness())
        await self.done.wait()
        for t in list(self.background):
            t.cancel()
        for w in (self.cw, self.dw):
            try:
                w.close()
            except Exception:
                pass
        return self.exit_code


def main() -> int:
    global k, msgspec
    ap = argparse.ArgumentParser(description="Reference kernel core (Python, generated SDK).")
    ap.add_argument("--control", required=True, help="control endpoint to dial: unix:PATH or tcp:HOST:PORT")
    ap.add_argument("--data", required=True, help="data endpoint to dial: unix:PATH or tcp:HOST:PORT")
    ap.add_argument("--session", default="", help="the shell's <session> id (logged only)")
    ap.add_argument("--break", dest="break_rule", choices=["credit"],
                    help="credit: send data-channel bytes beyond the granted credit")
    ap.add_argument("--sdk", default=os.environ.get("KERNEL_PY_SDK", str(DEFAULT_SDK)),
                    help="directory holding the generated contract_sdk package")
    ap.add_argument("--runtime", default=None,
                    help="directory holding the contract_runtime package it imports (default: DIR-runtime)")
    ap.add_argument("--connect-timeout", type=float, default=CONNECT_DEADLINE)
    ap.add_argument("--ttl", type=int, default=None,
                    help="permission.request ttl in seconds (default: the contract's 60; tests use 2)")
    args = ap.parse_args()
    sys.path[:0] = [args.sdk, args.runtime or args.sdk.rstrip("/") + "-runtime"]
    import msgspec as _msgspec
    from contract_sdk import kernel as _k
    k, msgspec = _k, _msgspec
    if args.ttl is None:
        args.ttl = int(k.PERMISSION_TTL_DEFAULT_SECONDS)
    if args.ttl < 1:
        ap.error("--ttl must be at least 1 second (the contract's minimum)")
    try:
        return asyncio.run(Core(args).run())
    except ConnectionError as e:
        log(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
