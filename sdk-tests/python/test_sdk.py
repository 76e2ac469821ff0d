"""Enums, constants, state machines and framing helpers of the generated package."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import MODULES, sdk

CONTRACTS = Path(os.environ.get("CONTRACTS_DIR", Path(__file__).resolve().parents[2] / "schema" / "contracts"))


def contract(module: str) -> dict[str, Any]:
    with (CONTRACTS / f"{module}.json").open(encoding="utf-8") as f:
        c: dict[str, Any] = json.load(f)
    return c


# --- error catalog and code tables --------------------------------------------


@pytest.mark.parametrize("module", [m for m in MODULES if contract(m).get("errors")])
def test_error_catalog_matches_contract(module: str) -> None:
    mod = sdk(module)
    errors = contract(module)["errors"]
    assert len(mod.ErrorCode) == len(errors)
    for e in errors:
        code = mod.ErrorCode(e["code"])
        assert code.value == e["code"]
        assert code.category == e["category"]
        assert code.retryable is e["retryable"]
        assert code.description == e["description"]
        assert code.wire_name == e.get("name")


def test_error_codes_spot_checks() -> None:
    k, r, t = sdk("kernel"), sdk("rukh"), sdk("toolchannel")
    assert k.ErrorCode.PROTOCOL_NOT_READY.value == "protocol.not_ready"
    assert k.ErrorCode.PROTOCOL_NOT_READY.retryable is True
    assert k.ErrorCode("protocol.incompatible").category == "protocol"
    assert r.ErrorCode.PARSE_ERROR == -32700 and r.ErrorCode.PARSE_ERROR.wire_name == "parse_error"
    assert t.ErrorCode(-32700) is t.ErrorCode.PARSE_ERROR
    with pytest.raises(ValueError):
        r.ErrorCode(1)


@pytest.mark.parametrize("module", MODULES)
def test_code_tables_hold_wire_values(module: str) -> None:
    mod = sdk(module)
    for key, table in contract(module).get("codes", {}).items():
        enum_cls = next(
            v for v in vars(mod).values()
            if isinstance(v, type) and (v.__doc__ or "").endswith(f"(contract table ``{key}``)")
        )
        assert [m.value for m in enum_cls] == [v["value"] for v in table["values"]], key


def test_code_tables_spot_checks() -> None:
    t, r, x, k = sdk("toolchannel"), sdk("rukh"), sdk("xsession"), sdk("kernel")
    assert t.CloseCodes.VERSION_UNSUPPORTED == 4001
    assert t.CloseCodes(4005) is t.CloseCodes.RELEASED
    assert r.CliExitCodes.CANCELLED_DEADLINE.value == 124
    assert r.CliExitCodes.COMMAND_EXIT_CODE.value == "command"
    assert x.DropReason.RATE_LIMITED.value == "rate-limited"  # the type; the table is DropReasonTable
    assert x.DropReasonTable.QUEUE_FULL.value == "queue-full"
    # A table named like a state machine or a type gets a Table suffix.
    assert k.TaskStateTable.ACCEPTED.value == "accepted" and k.TaskState.FORGOTTEN.value == "forgotten"


def test_string_enums_decode_to_members() -> None:
    k = sdk("kernel")
    p = k.decode(k.CommandHandleParams, b'{"text":"hi","source":"voice"}')
    assert p.source is k.CommandSource.VOICE
    assert k.encode(p) == b'{"text":"hi","source":"voice"}'


# --- limits ---------------------------------------------------------------------


def test_limits_are_typed_constants() -> None:
    k, r, t, x = (sdk(m) for m in MODULES)
    assert k.CONTROL_PAYLOAD_MAX == 1024 * 1024 and isinstance(k.CONTROL_PAYLOAD_MAX, int)
    assert k.DATA_PAYLOAD_MAX == 1048564
    assert k.HEARTBEAT_SILENCE_SECONDS == 5.0 and isinstance(k.HEARTBEAT_SILENCE_SECONDS, float)
    assert r.FRAME_PAYLOAD_MAX == 1048576 and r.LIFECYCLE_PAYLOAD_MAX == 16384
    assert r.LOG_INTAKE_RECORDS_RATE_BURST == 100 and r.LOG_INTAKE_RECORDS_RATE_PER_SECONDS == 1.0
    assert t.MAX_MESSAGE_BYTES == 8 * 1024 * 1024
    assert t.HANDSHAKE_SECONDS == 10.0 and t.MAX_EXEC_SECONDS == 900.0
    assert x.LINE_MAX == 1048576
    assert x.REGISTRY_DIR_MODE == 0o700 and x.HELD_EXPIRY5M == 300.0


# --- state machines -------------------------------------------------------------


@pytest.mark.parametrize("module", MODULES)
def test_every_listed_transition_is_allowed(module: str) -> None:
    mod = sdk(module)
    machines = contract(module).get("stateMachines", {})
    checks = {n[len("check_"):-len("_transition")]: f for n, f in vars(mod).items()
              if n.startswith("check_") and n.endswith("_transition")}
    assert len(checks) == len(machines)
    for key, m in machines.items():
        enum_cls = next(
            v for v in vars(mod).values()
            if isinstance(v, type) and (v.__doc__ or "").endswith(f"(state machine ``{key}``)")
        )
        check = next(f for n, f in checks.items() if n.replace("_", "") == key.replace("-", "").lower())
        for tr in m["transitions"]:
            assert check(enum_cls(tr["from"]), enum_cls(tr["to"])) is True


def test_invalid_transition_raises_typed_error() -> None:
    k = sdk("kernel")
    with pytest.raises(k.InvalidTransition) as e:
        k.check_task_transition(k.TaskState.DONE, k.TaskState.RUNNING)
    assert e.value.machine == "task" and e.value.current == "done" and e.value.new == "running"
    assert isinstance(e.value, k.ContractError)
    assert k.check_task_transition(k.TaskState.ACCEPTED, k.TaskState.RUNNING)
    assert k.TASK_STATE_INITIAL is k.TaskState.ACCEPTED
    assert k.TaskState.FORGOTTEN in k.TASK_STATE_TERMINAL


def test_ignored_transition_returns_false() -> None:
    k = sdk("kernel")
    # liveness: transitions not listed are repeats to ignore.
    assert k.check_liveness_transition(k.LivenessState.DEAD, k.LivenessState.ALIVE) is False


# --- framing over real sockets --------------------------------------------------


def pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    return a, b


@pytest.mark.parametrize("module,channel", [("kernel", "control"), ("rukh", "ipc")])
def test_length_prefixed_round_trip(module: str, channel: str) -> None:
    mod = sdk(module)
    read, write = getattr(mod, f"read_{channel}_frame"), getattr(mod, f"write_{channel}_frame")
    a, b = pair()
    with a, b:
        payloads = [b'{"a":1}', b"", b"x" * 70000]
        t = threading.Thread(target=lambda: [write(a, p) for p in payloads])
        t.start()
        got = [read(b) for _ in payloads]
        t.join()
        assert got == payloads
        a.shutdown(socket.SHUT_WR)
        assert read(b) is None


@pytest.mark.parametrize("module,channel,cap", [("kernel", "control", "CONTROL_PAYLOAD_MAX"), ("rukh", "ipc", "FRAME_PAYLOAD_MAX")])
def test_oversize_prefix_refused_before_payload(module: str, channel: str, cap: str) -> None:
    mod = sdk(module)
    a, b = pair()
    with a, b:
        # 0xFFFFFFFF announced, followed by bytes that must stay unread.
        a.sendall(b"\xff\xff\xff\xff" + b"NEXT")
        with pytest.raises(mod.FrameTooLarge) as e:
            getattr(mod, f"read_{channel}_frame")(b)
        assert e.value.length == 0xFFFFFFFF and e.value.cap == getattr(mod, cap)
        assert b.recv(16) == b"NEXT"  # the payload was not read
        # One past the cap is refused too; exactly the cap is not.
        limit = getattr(mod, cap)
        a.sendall((limit + 1).to_bytes(4, "big"))
        with pytest.raises(mod.FrameTooLarge):
            getattr(mod, f"read_{channel}_frame")(b)
        with pytest.raises(mod.FrameTooLarge):
            getattr(mod, f"write_{channel}_frame")(a, b"x" * (limit + 1))


def test_truncated_frame() -> None:
    k = sdk("kernel")
    a, b = pair()
    with a, b:
        a.sendall(b"\x00\x00\x00\x10abc")
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(k.FrameTruncated):
            k.read_control_frame(b)


def test_binary_data_frames() -> None:
    k = sdk("kernel")
    a, b = pair()
    with a, b:
        f = k.DataFrame(stream_id=7, seq=2**40, payload=b"\x00\x01pcm")
        k.write_data_frame(a, f)
        raw = b.recv(64)
        assert raw[:4] == (12 + 5).to_bytes(4, "big")
        assert struct.unpack(">IQ", raw[4:16]) == (7, 2**40)
        a.sendall(raw)
        assert k.read_data_frame(b) == f
        a.sendall(b"\xff\xff\xff\xff")
        with pytest.raises(k.FrameTooLarge):
            k.read_data_frame(b)
        a.sendall((5).to_bytes(4, "big"))
        with pytest.raises(k.FrameError):
            k.read_data_frame(b)  # shorter than the 12-byte header after the length
        with pytest.raises(k.FrameTooLarge):
            k.write_data_frame(a, k.DataFrame(1, 0, b"x" * k.DATA_PAYLOAD_MAX + b"x"))


def test_ndjson_lines() -> None:
    x = sdk("xsession")
    a, b = pair()
    with a, b:
        reader = x.LineReader(b)
        x.write_inbox_frame(a, b'{"msgV":1,"type":"auth","token":"t"}')
        a.sendall(b'{"a":"\xd0\x96"}\n{"b":2}\n')
        assert x.read_inbox_frame(reader) == b'{"msgV":1,"type":"auth","token":"t"}'
        assert x.read_inbox_frame(reader) == '{"a":"Ж"}'.encode()
        assert x.read_inbox_frame(reader) == b'{"b":2}'
        with pytest.raises(x.FrameError):
            x.write_inbox_frame(a, b"a\nb")
        a.shutdown(socket.SHUT_WR)
        assert x.read_inbox_frame(reader) is None


def test_ndjson_oversize_line_refused() -> None:
    x = sdk("xsession")
    a, b = pair()
    with a, b:
        reader = x.LineReader(b)
        big = b"x" * (x.LINE_MAX + 1)
        with pytest.raises(x.FrameTooLarge):
            x.write_inbox_frame(a, big)
        t = threading.Thread(target=lambda: a.sendall(big + b"\n"))
        t.start()
        with pytest.raises(x.FrameTooLarge):
            x.read_inbox_frame(reader)
        t.join()
    # A line with no newline at all stops once it provably exceeds the cap.
    a, b = pair()
    with a, b:
        reader = x.LineReader(b)
        t = threading.Thread(target=lambda: a.sendall(b"y" * (3 * x.LINE_MAX + 70000)))
        t.start()
        with pytest.raises(x.FrameTooLarge):
            x.read_inbox_frame(reader)
        b.close()
        t.join()
    # The cap counts UTF-16 units: LINE_MAX three-byte characters fit.
    a, b = pair()
    with a, b:
        reader = x.LineReader(b)
        line = "Ж".encode() * 10 + "\u20ac".encode() * (x.LINE_MAX - 10)
        t = threading.Thread(target=lambda: x.write_inbox_frame(a, line))
        t.start()
        assert x.read_inbox_frame(reader) == line
        t.join()


def test_websocket_message_cap() -> None:
    t = sdk("toolchannel")
    t.check_ws_message("x" * t.MAX_MESSAGE_BYTES)
    with pytest.raises(t.FrameTooLarge):
        t.check_ws_message(b"x" * (t.MAX_MESSAGE_BYTES + 1))


def test_asyncio_framing() -> None:
    k, x = sdk("kernel"), sdk("xsession")

    async def main() -> None:
        a, b = socket.socketpair()
        ra, wa = await asyncio.open_unix_connection(sock=a)
        rb, wb = await asyncio.open_unix_connection(sock=b)
        await k.write_control_frame_async(wa, b'{"x":1}')
        assert await k.read_control_frame_async(rb) == b'{"x":1}'
        await k.write_data_frame_async(wa, k.DataFrame(1, 2, b"p"))
        assert await k.read_data_frame_async(rb) == k.DataFrame(1, 2, b"p")
        wa.write(b"\xff\xff\xff\xff")
        await wa.drain()
        with pytest.raises(k.FrameTooLarge):
            await k.read_control_frame_async(rb)
        await x.write_inbox_frame_async(wa, b'{"y":2}')
        wa.write(b"z" * 200000 + b"\n")  # over the stream's 64 KiB limit, under LINE_MAX
        await wa.drain()
        assert await x.read_inbox_frame_async(rb) == b'{"y":2}'
        assert await x.read_inbox_frame_async(rb) == b"z" * 200000
        wa.close()
        await wa.wait_closed()
        assert await k.read_control_frame_async(rb) is None
        wb.close()
        await wb.wait_closed()

    asyncio.run(main())


def test_decode_channel_messages() -> None:
    k, r, t, x = (sdk(m) for m in MODULES)
    m = k.decode_control_message(b'{"v":1,"type":"event","id":"e","timestamp":1.5,"trace_id":"t","method":"ping","payload":{}}')
    assert isinstance(m, k.EventMessage) and m.method == "ping"
    assert isinstance(r.decode_ipc_message(b'{"jsonrpc":"2.0","method":"rukh.log","params":{}}'), r.Notification)
    assert isinstance(t.decode_ws_message(b'{"jsonrpc":"2.0","id":3,"result":{}}'), t.JsonRpcResponse)
    env = x.decode_inbox_message(b'{"msgV":1,"type":"auth","token":"t"}')
    assert env.type == "auth"
