#!/usr/bin/env python3
"""xsession reference session (seed 001, contract schema/contracts/xsession.json).

One cross-session messaging participant (`kind: "external"`), written with the
generated Python SDK (`contract_sdk.xsession`): it binds an inbox Unix socket,
publishes its registry record, discovers peers from the registry directory,
sends user messages (auth line + user frame, one write, half-close) and
receives them (auth check, §6 pipeline: misaddressed, admission buckets,
duplicate window, processed ids, policy, hold, queue), answering every outcome
with a delivery_status frame on a NEW connection to the frame's `from`.
Statuses it receives drive the SDK's deliveryStatus machine (repeats ignored).

Usage: see examples/xsession/README.md, or `session.py --help`.
Exit codes: 0 every expectation met; 1 internal error; 2 bad usage or the
target could not be resolved (not found / ambiguous); 3 some sent message had
no settled status when --timeout passed; 4 fewer than --expect user messages
arrived before --timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import stat
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

try:
    import msgspec
    import contract_runtime as sdk_rt
    from contract_sdk import xsession as xs
except ImportError as e:  # the SDK is generated, never committed
    sys.stderr.write(
        f"session.py: cannot import the generated SDK ({e}); run\n"
        "  contractgen generate --lang python --out DIR schema/contracts/xsession.json\n"
        "  contractgen runtime --lang python --out DIR-runtime\n"
        "and put DIR and DIR-runtime on PYTHONPATH (examples/xsession/run.sh does this).\n"
    )
    sys.exit(1)

# Registry file names: canonical decimal PID, optional 8-hex suffix (files.sessionRecord.path).
RECORD_NAME = re.compile(r"^([1-9][0-9]*)(-[0-9a-f]{%d})?\.json$" % xs.REGISTRY_SUFFIX_HEX_CHARS)
# A record is small; refuse to slurp anything pathological from a shared directory.
RECORD_READ_MAX = 1 << 20
# Best-effort outgoing connections (statuses, sends) must not hang the session.
DIAL_DEADLINE = 5.0
# Dropped verdicts arriving this close together go out as one frame (droppedMsgIds, X-17).
DROP_BATCH_SECONDS = 0.05
USER_OPTIONAL = ("from", "replyToken", "fromName", "fromMode", "toSessionId", "priority")
STATUS_OPTIONAL = ("from", "reason", "dropReason", "droppedMsgIds")
SETTLED_DEFAULT = "delivered,denied,refused,expired,misaddressed,dropped"

S = xs.DeliveryStatusState
P = xs.RecipientPipelineState
C = xs.InboxConnectionState


def log(name: str, text: str) -> None:
    sys.stderr.write(f"[{name}] {text}\n")
    sys.stderr.flush()


# --- process identity (procStart, pidNs) --------------------------------------------


def boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
        return f.read().strip()


def start_ticks(pid: int) -> Optional[int]:
    """Field 22 (starttime) of /proc/<pid>/stat, or None when the PID is not alive."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: fields resume after the LAST ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def pid_ns() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def session_ref(session_id: str) -> str:
    """ref = first refHexChars hex digits of sha256(UTF-8 sessionId) (X-21)."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()[: xs.REF_HEX_CHARS]


# --- SDK helpers --------------------------------------------------------------------


def checked(tp: Any, obj: Any) -> bytes:
    """Encode with the SDK and decode back as `tp`, so nothing unvalidated leaves."""
    data = xs.encode(obj)
    xs.decode(tp, data)
    return data


def ndjson(*payloads: bytes) -> bytes:
    """Lines framed by the SDK (cap counted in UTF-16 units), to be sent in ONE write."""
    return b"".join(sdk_rt.line(p, xs.LINE_MAX, True) for p in payloads)


def lenient(tp: Any, line: bytes, optional: tuple[str, ...]) -> Any:
    """Decode a frame; an optional member with a bad form is discarded on its own (X-10)."""
    try:
        return xs.decode(tp, line)
    except xs.DecodeFailure as first:
        try:
            raw = msgspec.json.decode(line)
        except msgspec.DecodeError:
            raise first from None
        err = first
        for _ in optional:
            key = err.path[2:].split(".")[0].split("[")[0] if err.path.startswith("$.") else ""
            if key not in optional or not isinstance(raw, dict) or key not in raw:
                raise err
            del raw[key]
            try:
                return xs.decode(tp, msgspec.json.encode(raw))
            except xs.DecodeFailure as again:
                err = again
        raise err


class Bucket:
    """Token bucket (X-29): full at start, `burst` tokens, one more every `per` seconds."""

    def __init__(self, burst: int, per: float) -> None:
        self.burst = float(burst)
        self.per = per
        self.tokens = float(burst)
        self.t = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.t) / self.per)
        self.t = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


# --- registry -------------------------------------------------------------------------


def ensure_private_dir(path: str, mode: int) -> None:
    """Create `path` with `mode` if missing; refuse a symlink (never write through one)."""
    if os.path.islink(path):
        raise SystemExit(f"refusing to use {path}: it is a symlink")
    if not os.path.isdir(path):
        os.makedirs(path, mode=mode, exist_ok=True)
        os.chmod(path, mode)


def write_record(directory: str, filename: str, data: bytes) -> str:
    """Temp file in the same directory, created 0600, then rename over the target."""
    ensure_private_dir(directory, xs.REGISTRY_DIR_MODE)
    target = os.path.join(directory, filename)
    if os.path.islink(target):
        raise SystemExit(f"refusing to write {target}: it is a symlink")
    tmp = os.path.join(directory, f".{filename}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, xs.REGISTRY_FILE_MODE)
    try:
        os.fchmod(fd, xs.REGISTRY_FILE_MODE)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, target)
    return target


@dataclass
class Peer:
    path: str
    record: Any  # xs.RegistryRecord
    state: xs.RegistryRecordState


def list_fresh(directory: str, me_pid: int, my_ns: int, my_boot: str, name: str) -> list[Peer]:
    """Fresh records of the registry; proven-stale ones are deleted (X-22)."""
    out: list[Peer] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for fn in names:
        m = RECORD_NAME.match(fn)
        if not m:
            continue
        path = os.path.join(directory, fn)
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > RECORD_READ_MAX:
                continue
            with open(path, "rb") as f:
                data = f.read(RECORD_READ_MAX)
        except OSError:
            continue
        try:
            rec = xs.decode(xs.RegistryRecord, data)
        except xs.DecodeFailure:
            # Includes schemaVersion > 1: skipped, never deleted (§7).
            continue
        if rec.pid != int(m.group(1)) or rec.pid_ns != my_ns:
            continue
        if rec.proc_start is not None:
            boot, _, ticks = rec.proc_start.rpartition(":")
            if boot != my_boot:
                continue
            live = start_ticks(rec.pid)
            if live is None or str(live) != ticks:
                # Same namespace and boot: procStart proves the owner is gone.
                if rec.pid != me_pid:
                    xs.check_registry_record_transition(xs.RegistryRecordState.PUBLISHED, xs.RegistryRecordState.STALE)
                    try:
                        os.unlink(path)
                        log(name, f"removed stale record {fn}")
                    except OSError:
                        pass
                continue
        elif start_ticks(rec.pid) is None:
            continue  # not fresh, and procStart null forbids cleanup by others
        out.append(Peer(path, rec, xs.RegistryRecordState.FRESH))
    return out


class AddressError(Exception):
    pass


def resolve(address: str, peers: list[Peer], my_session: str) -> Optional[Peer]:
    """Address grammar (table addressForm): name, name [ref], [ref], bare ref."""
    cands = [p for p in peers if p.record.session_id != my_session]
    m = re.fullmatch(r"\s*(.*?)\s*\[([0-9a-f]{%d})\]\s*" % xs.REF_HEX_CHARS, address)
    if m:
        nm, ref = m.group(1), m.group(2)
        hits = [p for p in cands if session_ref(p.record.session_id) == ref and (not nm or p.record.name == nm)]
    else:
        hits = [p for p in cands if p.record.name == address]
        if re.fullmatch(r"[0-9a-f]{%d}" % xs.REF_HEX_CHARS, address):
            hits += [p for p in cands if session_ref(p.record.session_id) == address and p not in hits]
    if len(hits) > 1:
        # An ambiguous address is an error, never a guess (§1).
        refs = ", ".join(f"{p.record.name} [{session_ref(p.record.session_id)}]" for p in hits)
        raise AddressError(f"address {address!r} is ambiguous: {refs}")
    return hits[0] if hits else None


# --- the session -------------------------------------------------------------------------


@dataclass
class Inbound:
    frame: Any  # xs.UserFrame
    state: P
    drop_reason: Optional[str] = None


@dataclass
class Sent:
    state: S = S.PENDING
    drop_reason: Optional[str] = None
    history: list[str] = field(default_factory=list)


class Session:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.name: str = a.name
        self.pid = os.getpid()
        self.session_id = str(uuid.uuid4())
        self.token: Optional[str] = None if a.no_token else secrets.token_hex(xs.IPC_TOKEN_HEX_CHARS // 2)
        self.boot = boot_id()
        self.ns = pid_ns()
        self.record_path: Optional[str] = None
        self.sock_path: Optional[str] = None
        self.ipc_path: str = ""
        self.reply_path: str = ""
        self.server: Optional[asyncio.base_events.Server] = None
        self.open_conns = 0
        self.tasks: set[asyncio.Task[Any]] = set()
        self.stop = asyncio.Event()
        # recipient state (one hosted session)
        self.sender_buckets: dict[str, Bucket] = {}
        self.global_bucket = Bucket(xs.GLOBAL_RATE_BURST, xs.GLOBAL_RATE_PER_SECONDS)
        self.bodies: dict[tuple[str, str], tuple[float, str]] = {}
        self.decided: dict[str, Inbound] = {}
        self.held: dict[str, Inbound] = {}
        self.queue: list[Inbound] = []
        self.drop_batches: dict[tuple[str, str, str], list[str]] = {}
        self.received: list[dict[str, Any]] = []
        self.conn_drops: dict[str, int] = {}
        # sender state
        self.sent: dict[str, Sent] = {}
        self.send_buckets: dict[str, Bucket] = {}
        self.repeats_ignored = 0
        self.unknown_statuses = 0
        self.noise = 0
        self.local_refusals = 0
        self.statuses_sent = 0
        self.received_event = asyncio.Event()
        self.status_event = asyncio.Event()

    def log(self, text: str) -> None:
        log(self.name, text)

    def spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    # --- inbox binding ---------------------------------------------------------------

    def candidates(self) -> list[str]:
        if self.a.socket:
            return [self.a.socket]
        uid_hex = hashlib.sha256(f"qwen-socks:{os.getuid()}".encode()).hexdigest()[: xs.SOCKET_DIR_SUFFIX_HEX_CHARS]
        out = []
        if os.environ.get("XDG_RUNTIME_DIR"):
            out.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "qwen-socks", f"{self.pid}.sock"))
        if os.environ.get("TMPDIR"):
            out.append(os.path.join(os.environ["TMPDIR"], f"qwen-socks-{uid_hex}", f"{self.pid}.sock"))
        out.append(os.path.join("/tmp", f"qwen-socks-{uid_hex}", f"{self.pid}.sock"))
        return out

    def bind_inbox(self) -> socket.socket:
        for path in self.candidates():
            if len(path.encode()) > xs.SOCKET_PATH_MAX:
                self.log(f"socket candidate skipped (over {xs.SOCKET_PATH_MAX} bytes): {path}")
                continue
            try:
                ensure_private_dir(os.path.dirname(path), xs.SOCKET_DIR_MODE)
                if os.path.exists(path) or os.path.islink(path):
                    if not stat.S_ISSOCK(os.lstat(path).st_mode):
                        self.log(f"socket candidate skipped (not a socket): {path}")
                        continue
                    if self._live(path):
                        # Another namespace's listener holds the PID name: bind beside it.
                        path = os.path.join(
                            os.path.dirname(path),
                            f"{self.pid}-{secrets.token_hex(xs.REGISTRY_SUFFIX_HEX_CHARS // 2)}.sock",
                        )
                    else:
                        os.unlink(path)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                old = os.umask(0o177)
                try:
                    s.bind(path)
                finally:
                    os.umask(old)
                os.chmod(path, xs.SOCKET_FILE_MODE)
                s.listen(xs.MAX_CONNECTIONS)
                s.setblocking(False)
                self.sock_path = path
                return s
            except OSError as e:
                self.log(f"socket candidate {path} failed: {e}")
        raise SystemExit("no inbox socket candidate worked")

    @staticmethod
    def _live(path: str) -> bool:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(1.0)
        try:
            c.connect(path)
            return True
        except OSError:
            return False
        finally:
            c.close()

    def publish(self) -> None:
        rec = xs.RegistryRecord(
            schema_version=1,
            pid=self.pid,
            proc_start=f"{self.boot}:{start_ticks(self.pid)}",
            pid_ns=self.ns,
            session_id=self.session_id,
            cwd=os.getcwd(),
            name=self.name,
            started_at=int(time.time() * 1000),
            qwen_version="0.23.0",
            kind=xs.RecordKind.EXTERNAL.value,
            ipc_path=self.ipc_path,
        )
        if self.token is not None:
            rec.ipc_token = self.token
        self.record_path = write_record(self.a.registry, f"{self.pid}.json", checked(xs.RegistryRecord, rec))
        self.log(
            f"registered {os.path.basename(self.record_path)} sessionId={self.session_id} "
            f"ref={session_ref(self.session_id)} ipcPath={self.ipc_path}"
        )

    def unpublish(self) -> None:
        if self.record_path:
            try:
                os.unlink(self.record_path)
            except OSError:
                pass
            self.record_path = None
        if self.sock_path:
            try:
                os.unlink(self.sock_path)
            except OSError:
                pass
            self.sock_path = None

    # --- listener side ---------------------------------------------------------------

    def drop_conn(self, why: str) -> None:
        self.conn_drops[why] = self.conn_drops.get(why, 0) + 1
        self.log(f"inbound connection dropped silently: {why}")

    async def on_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_conns >= xs.MAX_CONNECTIONS and self.a.brk != "no-max-connections":
            self.drop_conn("maxConnections")  # closed unread
            writer.close()
            return
        self.open_conns += 1
        try:
            await self.serve_conn(reader)
        except asyncio.CancelledError:
            # The session is ending with the connection open: close it, no traceback.
            pass
        except Exception as e:  # one bad connection must not take the inbox down
            self.log(f"connection error: {e!r}")
        finally:
            self.open_conns -= 1
            # The listener never writes; it only closes.
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), DIAL_DEADLINE)
            except (OSError, asyncio.TimeoutError):
                pass

    async def serve_conn(self, reader: asyncio.StreamReader) -> None:
        loop = asyncio.get_running_loop()
        state = C.ACCEPTED
        kind: Optional[xs.TokenKind] = None
        deadline = loop.time() + xs.PARSEABLE_LINE_DEADLINE
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                self.drop_conn("parseableLineDeadline")
                return
            try:
                line = await asyncio.wait_for(xs.read_inbox_frame_async(reader), remaining)
            except asyncio.TimeoutError:
                self.drop_conn("parseableLineDeadline")
                return
            except xs.FrameTooLarge:
                self.drop_conn("lineMax")
                return
            except (xs.FrameTruncated, OSError):
                return  # an unterminated last line is not a frame
            if line is None:
                return
            if self.a.brk == "line-bytes" and len(line) > xs.LINE_MAX:
                # The broken measure: bytes, where the cap counts UTF-16 code units.
                self.drop_conn("lineMax")
                return
            if state is C.ACCEPTED and self.token is not None:
                # The first line must be an auth line with our token (§3); else silent drop.
                try:
                    auth = xs.decode(xs.AuthLine, line)
                except xs.DecodeFailure:
                    xs.check_inbox_connection_transition(state, C.CLOSED)
                    self.drop_conn("no-auth")
                    return
                if not hmac.compare_digest(auth.token.encode(), self.token.encode()):
                    xs.check_inbox_connection_transition(state, C.CLOSED)
                    self.drop_conn("bad-token")
                    return
                kind = xs.TokenKind.PEER  # own-process / controller tokens are not issued here
                xs.check_inbox_connection_transition(state, C.AUTHENTICATED)
                state = C.AUTHENTICATED
                deadline = loop.time() + xs.PARSEABLE_LINE_DEADLINE
                continue
            if state is C.ACCEPTED:
                xs.check_inbox_connection_transition(state, C.AUTHENTICATED)
                state = C.AUTHENTICATED
                kind = xs.TokenKind.PEER
            try:
                env = xs.decode_inbox_message(line)
            except xs.DecodeFailure:
                continue  # garbage / not an object: skipped, deadline keeps running
            deadline = loop.time() + xs.PARSEABLE_LINE_DEADLINE
            if env.msg_v > 1:
                if self.a.brk != "newer-frames":
                    continue  # a newer frame version is dropped (§7)
                # The broken reader takes it for a frame of its own version.
                line = json.dumps({**json.loads(line), "msgV": 1}).encode()
            if env.type == xs.FrameType.USER.value:
                try:
                    uf = lenient(xs.UserFrame, line, USER_OPTIONAL)
                except xs.DecodeFailure as e:
                    self.log(f"user frame discarded ({e.label} at {e.path})")
                    continue
                self.on_user(uf, kind or xs.TokenKind.PEER)
            elif env.type == xs.FrameType.CONTROL.value:
                try:
                    ds = lenient(xs.DeliveryStatusFrame, line, STATUS_OPTIONAL)
                except xs.DecodeFailure:
                    continue  # unknown control action or malformed: skipped
                self.on_status(ds)
            # auth (repeated, or at a token-less inbox) and unknown types are skipped.

    # --- recipient pipeline (§6) -----------------------------------------------------

    def step(self, ib: Inbound, new: P) -> None:
        xs.check_recipient_pipeline_transition(ib.state, new)
        ib.state = new

    def on_user(self, uf: Any, kind: xs.TokenKind) -> None:
        ib = Inbound(uf, P.RECEIVED)
        frm = uf.from_ if uf.from_ is not msgspec.UNSET else ""
        # Single-session inbox: a missing toSessionId means us; another id means nobody here.
        if uf.to_session_id is not msgspec.UNSET and uf.to_session_id != self.session_id:
            self.step(ib, P.MISADDRESSED)
            self.decided[uf.msg_id] = ib
            self.report(ib, xs.DeliveryStatus.MISADDRESSED)
            return
        # Step 1, admission: tokens are not returned when a later check fails.
        bucket = self.sender_buckets.setdefault(frm, Bucket(xs.PER_SENDER_RATE_BURST, xs.PER_SENDER_RATE_PER_SECONDS))
        reason: Optional[xs.DropReason] = None
        per_sender = self.a.brk == "no-sender-rate" or bucket.take()
        if not per_sender or not (self.a.brk == "no-global-rate" or self.global_bucket.take()):
            reason = xs.DropReason.RATE_LIMITED
        elif kind is xs.TokenKind.PEER:
            now = time.monotonic()
            key = (frm, uf.message.content)
            prev = self.bodies.get(key)
            if prev and now - prev[0] < xs.DUPLICATE_WINDOW and prev[1] != uf.msg_id and self.a.brk != "no-duplicates":
                reason = xs.DropReason.DUPLICATE
            elif not prev or now - prev[0] >= xs.DUPLICATE_WINDOW:
                self.bodies[key] = (now, uf.msg_id)
        if reason is not None:
            self.drop(ib, reason)
            return
        self.step(ib, P.ADMITTED)
        # Step 2, processed ids: a decided msgId repeats its current verdict.
        prev_ib = self.decided.get(uf.msg_id)
        if prev_ib is not None:
            self.step(ib, P.REPLAYED)
            self.log(f"msgId {uf.msg_id} already decided: replaying {prev_ib.state.value}")
            self.report(ib, self.verdict_of(prev_ib))
            return
        # Step 3, policy.
        policy = self.a.inbound
        if policy is None:
            own = kind in (xs.TokenKind.OWN_PROCESS, xs.TokenKind.CONTROLLER)
            same = uf.from_mode is not msgspec.UNSET and uf.from_mode == self.a.mode
            policy = "accept" if own or same else "hold"
        if policy == xs.CrossSessionInbound.REFUSE.value:
            self.step(ib, P.REFUSED)
            self.decided[uf.msg_id] = ib
            self.report(ib, xs.DeliveryStatus.REFUSED)
        elif policy == xs.CrossSessionInbound.HOLD.value:
            if len(self.held) >= xs.HOLD_CAPACITY:
                self.drop(ib, xs.DropReason.QUEUE_FULL, admitted=True)
                return
            self.step(ib, P.HELD)
            self.decided[uf.msg_id] = ib
            self.held[uf.msg_id] = ib
            self.report(ib, xs.DeliveryStatus.HELD)
            self.spawn(self.hold_timers(ib))
        else:
            self.enqueue(ib)

    def verdict_of(self, ib: Inbound) -> xs.DeliveryStatus:
        # consumed sends nothing new; its last status was delivered.
        return xs.DeliveryStatus.DELIVERED if ib.state is P.CONSUMED else xs.DeliveryStatus(ib.state.value)

    def enqueue(self, ib: Inbound) -> None:
        if len(self.queue) >= xs.INPUT_QUEUE_CAPACITY:
            if ib.state is P.HELD:
                return  # no transition exists for a release into a full queue: stays held
            self.drop(ib, xs.DropReason.QUEUE_FULL, admitted=True)
            return
        self.step(ib, P.DELIVERED)
        self.decided[ib.frame.msg_id] = ib
        self.held.pop(ib.frame.msg_id, None)
        self.queue.append(ib)
        self.report(ib, xs.DeliveryStatus.DELIVERED)
        self.consume()

    def consume(self) -> None:
        """The session's model takes queued messages: shown as <cross_session_message>."""
        while self.queue:
            ib = self.queue.pop(0)
            uf = ib.frame
            self.step(ib, P.CONSUMED)
            frm = uf.from_ if uf.from_ is not msgspec.UNSET else ""
            nm = uf.from_name if uf.from_name is not msgspec.UNSET else ""
            # Envelope-like tags inside content are neutralised before the model sees them.
            body = re.sub(r"<(/?)cross_session_message", r"&lt;\1cross_session_message", uf.message.content)
            attr = lambda s: " ".join(s.split()).replace('"', "&quot;")  # noqa: E731
            print(f'<cross_session_message from="{attr(frm)}" name="{attr(nm)}">\n{body}\n</cross_session_message>', flush=True)
            self.received.append({"msgId": uf.msg_id, "from": frm, "fromName": nm, "content": uf.message.content})
            self.received_event.set()

    async def hold_timers(self, ib: Inbound) -> None:
        expiry = {"1m": xs.HELD_EXPIRY1M, "5m": xs.HELD_EXPIRY5M, "10m": xs.HELD_EXPIRY10M, "never": None}[self.a.held_expiry]
        release = self.a.release_held_after
        waits = [w for w in (expiry, release) if w is not None]
        if not waits:
            return
        await asyncio.sleep(min(waits))
        if ib.state is not P.HELD:
            return
        if release is not None and (expiry is None or release < expiry):
            self.log(f"held message {ib.frame.msg_id} released (stand-in for /peers)")
            self.enqueue(ib)
        else:
            self.step(ib, P.EXPIRED)
            self.held.pop(ib.frame.msg_id, None)
            self.report(ib, xs.DeliveryStatus.EXPIRED)

    def drop(self, ib: Inbound, reason: xs.DropReason, admitted: bool = False) -> None:
        # Dropped leaves no trace: not recorded as decided, so a resend is judged afresh.
        self.step(ib, P.DROPPED)
        ib.drop_reason = reason.value
        self.log(f"message {ib.frame.msg_id} dropped: {reason.value}")
        uf = ib.frame
        if uf.from_ is msgspec.UNSET:
            return
        token = uf.reply_token if uf.reply_token is not msgspec.UNSET else ""
        key = (uf.from_, token, reason.value)
        batch = self.drop_batches.get(key)
        if batch is None:
            self.drop_batches[key] = [uf.msg_id]
            self.spawn(self.flush_drops(key, uf.msg_v))
        else:
            batch.append(uf.msg_id)

    async def flush_drops(self, key: tuple[str, str, str], msg_v: int) -> None:
        await asyncio.sleep(DROP_BATCH_SECONDS)
        ids = self.drop_batches.pop(key, [])
        to, token, reason = key
        per = xs.DROPPED_MSG_IDS_MAX + 1
        for i in range(0, len(ids), per):
            chunk = ids[i : i + per]
            frame = xs.DeliveryStatusFrame(
                msg_v=1,
                msg_id=str(uuid.uuid4()),
                action=xs.ControlAction.DELIVERY_STATUS.value,
                status=xs.DeliveryStatus.DROPPED.value,
                orig_msg_id=chunk[0],
                from_=self.ipc_path,
                reason=f"dropped at admission or capacity: {reason}",
                drop_reason=xs.DropReason(reason),
            )
            if len(chunk) > 1:
                frame.dropped_msg_ids = chunk[1:]
            await self.deliver_status(to, token or None, frame)

    def report(self, ib: Inbound, status: xs.DeliveryStatus) -> None:
        """One best-effort delivery_status per outcome, on a new connection to `from`."""
        uf = ib.frame
        if uf.from_ is msgspec.UNSET:
            return  # no `from`, no status
        frame = xs.DeliveryStatusFrame(
            msg_v=1,
            msg_id=str(uuid.uuid4()),
            action=xs.ControlAction.DELIVERY_STATUS.value,
            status=status.value,
            orig_msg_id=uf.msg_id,
            from_=self.ipc_path,
            reason=f"{status.value} by {self.name}",
        )
        token = uf.reply_token if uf.reply_token is not msgspec.UNSET else None
        self.spawn(self.deliver_status(uf.from_, token, frame))

    async def deliver_status(self, to: str, token: Optional[str], frame: Any) -> None:
        lines = []
        if token is not None:
            lines.append(checked(xs.AuthLine, xs.AuthLine(msg_v=1, token=token)))
        lines.append(checked(xs.DeliveryStatusFrame, frame))
        ok = await self.dial_write(to, ndjson(*lines))
        if ok:
            self.statuses_sent += 1
        else:
            self.log(f"status {frame.status} for {frame.orig_msg_id} lost (best-effort)")

    async def dial_write(self, path: str, payload: bytes) -> bool:
        """Dial, write everything in one write, half-close, wait for the listener to close."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), DIAL_DEADLINE)
        except (OSError, asyncio.TimeoutError) as e:
            self.log(f"dial {path} failed: {e!r}")
            return False
        try:
            writer.write(payload)
            await asyncio.wait_for(writer.drain(), DIAL_DEADLINE)
            writer.write_eof()
            # The listener never writes: anything arriving is wrong-direction noise, discarded.
            extra = await asyncio.wait_for(reader.read(), DIAL_DEADLINE)
            if extra:
                self.log(f"{len(extra)} bytes from a listener discarded (wrong direction)")
            return True
        except (OSError, asyncio.TimeoutError) as e:
            self.log(f"write to {path} failed: {e!r}")
            return False
        finally:
            writer.close()

    # --- sender side -----------------------------------------------------------------

    def on_status(self, ds: Any) -> None:
        try:
            new = S(ds.status)
        except ValueError:
            self.unknown_statuses += 1
            self.log(f"unknown status {ds.status!r}: no transition")
            return
        if new is S.PENDING:
            self.unknown_statuses += 1
            return
        ids = [ds.orig_msg_id]
        if new is S.DROPPED and ds.dropped_msg_ids is not msgspec.UNSET:
            ids += list(ds.dropped_msg_ids)[: xs.DROPPED_MSG_IDS_MAX]
        for mid in ids:
            st = self.sent.get(mid)
            if st is None:
                self.noise += 1  # a status for a msgId never sent
                continue
            if xs.check_delivery_status_transition(st.state, new):
                self.log(f"status {mid}: {st.state.value} -> {new.value}")
                st.state = new
                st.history.append(new.value)
                if new is S.DROPPED and ds.drop_reason is not msgspec.UNSET:
                    st.drop_reason = ds.drop_reason.value
            else:
                self.repeats_ignored += 1
                self.log(f"status {mid}: {new.value} while {st.state.value} is a repeat, ignored")
        self.status_event.set()

    async def discover(self, address: str) -> Peer:
        loop = asyncio.get_running_loop()
        end = loop.time() + self.a.discover_timeout
        while True:
            peers = list_fresh(self.a.registry, self.pid, self.ns, self.boot, self.name)
            peer = resolve(address, peers, self.session_id)
            if peer is not None and peer.record.ipc_path is not msgspec.UNSET:
                return peer
            if loop.time() >= end:
                raise AddressError(f"no fresh, addressable session matches {address!r}")
            await asyncio.sleep(0.1)

    async def send(self, peer: Peer, text: str, msg_id: Optional[str] = None) -> Optional[str]:
        rec = peer.record
        if not self.a.no_sender_limit:
            # Mirror the recipient's per-sender limit and refuse before writing (§6 L125).
            b = self.send_buckets.setdefault(rec.ipc_path, Bucket(xs.PER_SENDER_RATE_BURST, xs.PER_SENDER_RATE_PER_SECONDS))
            if not b.take():
                self.local_refusals += 1
                self.log(f"send to {rec.name} refused locally: over its per-sender limit; batch messages instead")
                return None
        mid = msg_id or str(uuid.uuid4())
        uf = xs.UserFrame(
            msg_v=1,
            msg_id=mid,
            from_=self.reply_path,
            from_name=self.name,
            from_mode=self.a.mode,
            to_session_id=rec.session_id,
            priority="next",
            message=xs.ChatMessage(role="user", content=text),
        )
        if self.token is not None:
            uf.reply_token = self.token
        lines = []
        if rec.ipc_token is not msgspec.UNSET and self.a.brk != "no-auth":
            lines.append(checked(xs.AuthLine, xs.AuthLine(msg_v=1, token=rec.ipc_token)))
        lines.append(checked(xs.UserFrame, uf))
        self.sent.setdefault(mid, Sent())  # before writing: a fast status must not be noise
        ok = await self.dial_write(rec.ipc_path, ndjson(*lines))
        if ok and peer.state is xs.RegistryRecordState.FRESH:
            xs.check_registry_record_transition(peer.state, xs.RegistryRecordState.REACHABLE)
            peer.state = xs.RegistryRecordState.REACHABLE
        if not ok:
            self.log(f"message {mid} not written")
        else:
            self.log(f"sent {mid} to {rec.name} [{session_ref(rec.session_id)}]{' WITHOUT auth line (--break no-auth)' if self.a.brk == 'no-auth' else ''}")
        return mid

    # --- main ------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sessionId": self.session_id,
            "ref": session_ref(self.session_id),
            "ipcPath": self.ipc_path,
            "received": self.received,
            "sent": {k: {"state": v.state.value, "dropReason": v.drop_reason, "history": v.history} for k, v in self.sent.items()},
            "repeatsIgnored": self.repeats_ignored,
            "unknownStatuses": self.unknown_statuses,
            "noise": self.noise,
            "localRefusals": self.local_refusals,
            "statusesSent": self.statuses_sent,
            "connectionsDropped": self.conn_drops,
        }

    def settled(self) -> bool:
        want = set(self.a.settled.split(","))
        return all(v.state.value in want for v in self.sent.values())

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        sock = self.bind_inbox()
        assert self.sock_path is not None
        self.ipc_path = self.a.ipc_path or self.sock_path
        self.reply_path = self.a.reply_path or self.ipc_path
        self.server = await asyncio.start_unix_server(self.on_conn, sock=sock)
        rc = 0
        try:
            self.publish()
            end = loop.time() + self.a.timeout
            if self.a.send_to:
                try:
                    peer = await self.discover(self.a.send_to)
                except AddressError as e:
                    self.log(str(e))
                    return 2
                self.log(f"discovered {peer.record.name} [{session_ref(peer.record.session_id)}] at {peer.record.ipc_path}")
                texts = list(self.a.text or [])
                if self.a.count:
                    base = texts[0] if texts else f"hello from {self.name}"
                    texts = [base if self.a.same_text else f"{base} #{i + 1}" for i in range(self.a.count)]
                last = None
                for t in texts:
                    last = await self.send(peer, t) or last
                if self.a.resend_last and last is not None:
                    await self.wait_for(lambda: self.sent[last].state is not S.PENDING, end)
                    self.log(f"re-sending {last} with the same msgId")
                    await self.send(peer, texts[-1], msg_id=last)
            ok_recv = await self.wait_for(lambda: len(self.received) >= self.a.expect, end)
            ok_status = await self.wait_for(self.settled, end)
            if self.a.resend_last:
                # the replayed verdict arrives after the first one; give it the same deadline
                await self.wait_for(lambda: self.repeats_ignored > 0, end)
            if self.a.serve:
                await self.wait_for(lambda: False, end)
            if not ok_status:
                rc = 3
            elif not ok_recv:
                rc = 4
            # Let statuses we owe the peer go out, and absorb late repeats.
            await self.drain_tasks(loop.time() + DIAL_DEADLINE)
            if not self.stop.is_set():
                await asyncio.sleep(self.a.linger)
        finally:
            self.server.close()
            self.unpublish()
            await self.drain_tasks(loop.time() + DIAL_DEADLINE)
        return rc

    async def wait_for(self, cond: Any, end: float) -> bool:
        loop = asyncio.get_running_loop()
        while not cond():
            if self.stop.is_set() or loop.time() >= end:
                return bool(cond())
            await asyncio.sleep(0.02)
        return True

    async def drain_tasks(self, end: float) -> None:
        loop = asyncio.get_running_loop()
        while self.tasks and loop.time() < end:
            pending = [t for t in self.tasks if not t.done()]
            # hold timers may sleep for minutes: do not wait for them
            if all(getattr(t.get_coro(), "__name__", "") == "hold_timers" for t in pending):
                break
            await asyncio.sleep(0.02)
        for t in list(self.tasks):
            t.cancel()


def main() -> int:
    ap = argparse.ArgumentParser(description="xsession reference session (SDK-based).")
    home = os.environ.get("QWEN_HOME") or os.path.join(os.path.expanduser("~"), ".qwen")
    ap.add_argument("--registry", default=os.path.join(home, "sessions"), help="registry directory (default $QWEN_HOME/sessions)")
    ap.add_argument("--name", required=True, help="name in the registry record")
    ap.add_argument("--mode", default="prompting", help="own approval class; sent as fromMode (default prompting)")
    ap.add_argument("--socket", help="bind the inbox here instead of the §2 candidates")
    ap.add_argument("--ipc-path", help="ipcPath to publish (default: the bound socket; e.g. a proxy in front of it)")
    ap.add_argument("--reply-path", help="`from` put in user frames (default: --ipc-path)")
    ap.add_argument("--no-token", action="store_true", help="publish no ipcToken (inbox accepts without auth)")
    ap.add_argument("--inbound", choices=[v.value for v in xs.CrossSessionInbound], help="agents.crossSessionInbound (default unset)")
    ap.add_argument("--held-expiry", choices=[v.value for v in xs.CrossSessionHeldExpiry], default="5m")
    ap.add_argument("--release-held-after", type=float, help="release held messages after N s (stand-in for /peers)")
    ap.add_argument("--send-to", help="address: name, 'name [ref]', '[ref]' or ref")
    ap.add_argument("--text", action="append", help="message text (repeatable)")
    ap.add_argument("--count", type=int, default=0, help="send N messages ('TEXT #i')")
    ap.add_argument("--same-text", action="store_true", help="with --count: identical bodies (duplicate check)")
    ap.add_argument("--resend-last", action="store_true", help="re-send the last msgId once (the verdict is replayed)")
    ap.add_argument("--no-sender-limit", action="store_true", help="do not mirror the recipient's per-sender limit")
    ap.add_argument("--expect", type=int, default=0, help="user messages to receive before exiting")
    ap.add_argument("--settled", default=SETTLED_DEFAULT, help="states that count as settled for sent messages")
    ap.add_argument("--serve", action="store_true", help="keep serving until --timeout or SIGTERM")
    ap.add_argument("--timeout", type=float, default=20.0, help="overall deadline in seconds")
    ap.add_argument("--discover-timeout", type=float, default=10.0)
    ap.add_argument("--linger", type=float, default=0.5)
    ap.add_argument("--summary", help="write a JSON summary here on exit")
    ap.add_argument("--break", dest="brk", choices=["no-auth", "line-bytes", "newer-frames", "no-sender-rate", "no-global-rate", "no-duplicates", "no-max-connections"], help="break one rule on purpose")
    a = ap.parse_args()
    if a.release_held_after is not None and a.release_held_after < 0:
        ap.error("--release-held-after must be >= 0")
    sess = Session.__new__(Session)
    rc = 1

    async def go() -> int:
        Session.__init__(sess, a)
        return await sess.run()

    try:
        rc = asyncio.run(go())
    except SystemExit as e:
        log(a.name, str(e))
        rc = 2 if isinstance(e.code, str) else int(e.code or 0)
    except Exception as e:
        log(a.name, f"failed: {e!r}")
        rc = 1
    finally:
        if getattr(sess, "a", None) is not None:
            sess.unpublish()
            if a.summary:
                with open(a.summary, "w", encoding="utf-8") as f:
                    json.dump({**sess.summary(), "exit": rc}, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
