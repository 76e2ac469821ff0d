"""Enums, constants, state machines and framing helpers of the generated package."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import threading
import time
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
    k, r, t, x = (sdk(m) for m in ("kernel", "rukh", "toolchannel", "xsession"))
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
        def flood() -> None:
            # The reader gives up mid-line and closes: the rest cannot arrive.
            try:
                a.sendall(b"y" * (3 * x.LINE_MAX + 70000))
            except (BrokenPipeError, ConnectionResetError):
                pass

        t = threading.Thread(target=flood)
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
    k, r, t, x = (sdk(m) for m in ("kernel", "rukh", "toolchannel", "xsession"))
    m = k.decode_control_message(b'{"v":1,"type":"event","id":"e","timestamp":1.5,"trace_id":"t","method":"ping","payload":{}}')
    assert isinstance(m, k.EventMessage) and m.method == "ping"
    assert isinstance(r.decode_ipc_message(b'{"jsonrpc":"2.0","method":"rukh.log","params":{}}'), r.Notification)
    assert isinstance(t.decode_ws_message(b'{"jsonrpc":"2.0","id":3,"result":{}}'), t.JsonRpcResponse)
    env = x.decode_inbox_message(b'{"msgV":1,"type":"auth","token":"t"}')
    assert env.type == "auth"


# --- a channel's JSON rules (rukh ipc: strict profile, depth, items) -----------------


def frame_json(v: Any) -> bytes:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()


def json_depth(v: Any) -> int:
    """Nesting depth as the contracts count it: the top-level container is 1, scalars add none."""
    if isinstance(v, dict):
        return 1 + max((json_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((json_depth(x) for x in v), default=0)
    return 0


def json_items(v: Any) -> int:
    """Object members plus array elements, all levels."""
    if isinstance(v, dict):
        return len(v) + sum(json_items(x) for x in v.values())
    if isinstance(v, list):
        return len(v) + sum(json_items(x) for x in v)
    return 0


def ui_request(params: Any) -> dict[str, Any]:
    # params of a request are not typed by the envelope, so any shape decodes.
    return {"jsonrpc": "2.0", "id": "c:2", "method": "rukh.ui.event", "params": params}


def rukh_parse_error(data: bytes) -> Any:
    r = sdk("rukh")
    with pytest.raises(r.DecodeFailure) as e:
        r.decode_ipc_message(data)
    assert e.value.label == "parse", e.value
    return e.value


def test_ipc_json_rules_come_from_the_contract() -> None:
    r = sdk("rukh")
    c = contract("rukh")
    rules = c["channels"]["ipc"]["json"]
    assert rules["strict"] is True and rules["objectOnly"] is True
    caps = (c["limits"][rules["maxDepth"]]["value"], c["limits"][rules["maxItems"]]["value"])
    assert r.IPC_JSON_RULES == (True, True, *caps, rules.get("noNull", False))
    assert r.IPC_JSON_RULES.max_depth == r.JSON_DEPTH_MAX == 32 and r.IPC_JSON_RULES.max_items == r.JSON_ITEMS_MAX == 4096
    # Non-strict channels with caps keep msgspec but get the caps.
    k, t = sdk("kernel"), sdk("toolchannel")
    no_null = contract("kernel")["channels"]["control"]["json"].get("noNull", False)
    assert k.CONTROL_JSON_RULES == (False, True, k.JSON_MAX_DEPTH, k.JSON_MAX_ITEMS, no_null)
    assert t.WS_JSON_RULES == (False, True, t.MAX_JSON_DEPTH, t.MAX_JSON_ITEMS, False)
    assert not hasattr(sdk("xsession"), "INBOX_JSON_RULES")


def test_strict_duplicate_key_names_its_object() -> None:
    e = rukh_parse_error(b'{"jsonrpc":"2.0","id":"c:2","method":"rukh.ui.event","params":{"a":[{"x":1,"x":2}]}}')
    assert e.rule == "duplicate-key" and e.detail == 'duplicate key "x" at /params/a/0' and e.path == "$.params.a[0]"
    e = rukh_parse_error(b'{"jsonrpc":"2.0","id":"c:2","id":"c:3","method":"rukh.ui.event"}')
    assert e.rule == "duplicate-key" and '"id"' in e.detail and e.path == "$"
    # msgspec alone keeps the last value: the rule is the SDK's own.
    import msgspec

    assert msgspec.json.decode(b'{"a":1,"a":2}') == {"a": 2}


def test_strict_integers_within_2_pow_53() -> None:
    r = sdk("rukh")
    safe = 2**53 - 1
    for n in (safe + 1, -(safe + 1), 10**30):
        e = rukh_parse_error(frame_json(ui_request({"k": n})))
        assert e.rule == "unsafe-integer" and str(n) in e.detail
    m = r.decode_ipc_message(frame_json(ui_request({"k": safe, "m": -safe, "f": 1.5e300})))
    assert m.params == {"k": safe, "m": -safe, "f": 1.5e300}


def test_strict_profile_other_rules() -> None:
    good = frame_json(ui_request({}))
    cases = {
        "bom": b"\xef\xbb\xbf" + good,
        "invalid-utf8": good.replace(b"{}", b'{"k":"\xff"}'),
        "lone-surrogate": good.replace(b"{}", b'{"k":"\\ud800"}'),
        "non-finite": good.replace(b"{}", b'{"k":1e400}'),
        "syntax": good.replace(b"{}", b'{"k":NaN}'),
        "trailing-bytes": good + b"{}",
        "non-object": b"[" + good + b"]",
    }
    for rule, data in cases.items():
        assert rukh_parse_error(data).rule == rule, rule
    # A surrogate pair is one character, not a lone surrogate; trailing whitespace is fine.
    r = sdk("rukh")
    m = r.decode_ipc_message(good.replace(b"{}", b'{"k":"\\ud83d\\ude00"}') + b" \n")
    assert m.params == {"k": "\U0001F600"}


def nested(levels: int) -> Any:
    v: Any = {}
    for _ in range(levels - 1):
        v = {"d": v}
    return v


def test_strict_depth_cap_exactly() -> None:
    r = sdk("rukh")
    # The request is depth 1, params 2, so params holding `nested(n)` makes n + 2.
    at_cap = ui_request({"d": nested(r.JSON_DEPTH_MAX - 2)})
    assert json_depth(at_cap) == r.JSON_DEPTH_MAX
    assert isinstance(r.decode_ipc_message(frame_json(at_cap)), r.Request)
    over = ui_request({"d": nested(r.JSON_DEPTH_MAX - 1)})
    assert json_depth(over) == r.JSON_DEPTH_MAX + 1 == 33
    e = rukh_parse_error(frame_json(over))
    assert e.rule == "depth" and str(r.JSON_DEPTH_MAX) in e.detail
    # Far past any cap: the parser's recursion guard, still the depth rule.
    assert rukh_parse_error(b'{"a":' * 5000 + b"1" + b"}" * 5000).rule == "depth"


def test_strict_items_cap_exactly() -> None:
    r = sdk("rukh")
    base = json_items(ui_request({"pad": []}))
    at_cap = ui_request({"pad": [f"i{i}" for i in range(r.JSON_ITEMS_MAX - base)]})
    assert json_items(at_cap) == r.JSON_ITEMS_MAX
    assert isinstance(r.decode_ipc_message(frame_json(at_cap)), r.Request)
    over = ui_request({"pad": [f"i{i}" for i in range(r.JSON_ITEMS_MAX - base + 1)]})
    assert json_items(over) == 4097
    e = rukh_parse_error(frame_json(over))
    assert e.rule == "items" and str(r.JSON_ITEMS_MAX) in e.detail
    # Members count like elements.
    n = r.JSON_ITEMS_MAX - json_items(ui_request({})) + 1
    over_members = ui_request({f"m{i}": 0 for i in range(n)})
    assert json_items(over_members) == 4097
    assert rukh_parse_error(frame_json(over_members)).rule == "items"


def test_non_strict_channels_keep_msgspec_but_apply_caps() -> None:
    k, t = sdk("kernel"), sdk("toolchannel")
    event = {"v": 1, "type": "event", "id": "e", "timestamp": 1.5, "trace_id": "t", "method": "ping", "payload": {}}
    # Not strict: a duplicate key keeps the last value, a big integer is kept.
    text = frame_json(event).replace(b'"payload":{}', b'"payload":{"a":1,"a":2,"n":9007199254740993}')
    m = k.decode_control_message(text)
    assert m.payload == {"a": 2, "n": 9007199254740993}
    deep = dict(event, payload=nested(k.JSON_MAX_DEPTH))  # payload is depth 2: one too many
    with pytest.raises(k.DecodeFailure) as e:
        k.decode_control_message(frame_json(deep))
    assert e.value.label == "parse" and e.value.rule == "depth"
    wide = {"jsonrpc": "2.0", "id": 1, "result": {"pad": [0] * t.MAX_JSON_ITEMS}}
    with pytest.raises(t.DecodeFailure) as e:
        t.decode_ws_message(frame_json(wide))
    assert e.value.rule == "items"
    fits = {"jsonrpc": "2.0", "id": 1, "result": {"pad": [0] * (t.MAX_JSON_ITEMS - 4)}}
    assert json_items(fits) == t.MAX_JSON_ITEMS
    assert isinstance(t.decode_ws_message(frame_json(fits)), t.JsonRpcResponse)


# --- per-method caps (rukh lifecycle methods) ----------------------------------------


def sized(msg: dict[str, Any], size: int) -> bytes:
    """``msg`` padded (``pad`` in its params or result) to exactly ``size`` bytes."""
    key = "result" if "result" in msg else "params"
    empty = len(frame_json({**msg, key: {**msg[key], "pad": ""}}))
    data = frame_json({**msg, key: {**msg[key], "pad": "x" * (size - empty)}})
    assert len(data) == size
    return data


def test_method_caps_come_from_the_contract() -> None:
    r = sdk("rukh")
    methods = contract("rukh")["methods"]
    capped = {k: m for k, m in methods.items() if "maxPayload" in m}
    assert set(r.IPC_METHOD_CAPS) == set(capped) == {"rukh.initialize", "rukh.cancel", "rukh.close", "rukh.log"}
    for name, m in capped.items():
        cap = r.IPC_METHOD_CAPS[name]
        assert cap.limit == m["maxPayload"] == "lifecyclePayloadMax" and cap.cap == r.LIFECYCLE_PAYLOAD_MAX
        assert cap.ignore is (m.get("overMaxPayload") == "ignore")
    assert r.IPC_METHOD_CAPS["rukh.log"].ignore is True
    assert r.METHODS["rukh.call"].senders == ("extension",) and r.METHODS["rukh.initialize"].senders == ("core",)
    assert r.METHODS["rukh.log"].kind == "notification"


def test_request_over_its_method_cap() -> None:
    r = sdk("rukh")
    init = {"jsonrpc": "2.0", "id": "c:1", "method": "rukh.initialize", "params": {}}
    assert isinstance(r.decode_ipc_message(sized(init, r.LIFECYCLE_PAYLOAD_MAX)), r.Request)
    with pytest.raises(r.MethodFrameTooLarge) as e:
        r.decode_ipc_message(sized(init, r.LIFECYCLE_PAYLOAD_MAX + 1))
    err = e.value
    assert isinstance(err, r.FrameTooLarge) and isinstance(err, r.FrameError)
    assert (err.method, err.cap, err.length, err.limit, err.ignore, err.reply) == (
        "rukh.initialize", 16384, 16385, "lifecyclePayloadMax", False, False)
    # A method without a cap of its own has only the channel's.
    invoke = {"jsonrpc": "2.0", "id": "c:2", "method": "rukh.invoke", "params": {}}
    assert isinstance(r.decode_ipc_message(sized(invoke, 100000)), r.Request)


def test_over_cap_log_reports_ignore() -> None:
    r = sdk("rukh")
    log = {"jsonrpc": "2.0", "method": "rukh.log", "params": {"level": "info", "message": "m"}}
    assert isinstance(r.decode_ipc_message(sized(log, r.LIFECYCLE_PAYLOAD_MAX)), r.Notification)
    with pytest.raises(r.MethodFrameTooLarge) as e:
        r.decode_ipc_message(sized(log, r.LIFECYCLE_PAYLOAD_MAX + 1))
    assert e.value.ignore is True and e.value.method == "rukh.log" and "dropped" in str(e.value)


def test_reply_over_the_cap_of_the_method_it_answers() -> None:
    r = sdk("rukh")
    reply = {"jsonrpc": "2.0", "id": "c:1", "result": {}}
    fits, over = sized(reply, r.LIFECYCLE_PAYLOAD_MAX), sized(reply, r.LIFECYCLE_PAYLOAD_MAX + 1)
    r.check_ipc_reply("rukh.initialize", fits)
    r.check_ipc_reply("rukh.invoke", over)  # no cap of its own
    with pytest.raises(r.MethodFrameTooLarge) as e:
        r.check_ipc_reply("rukh.close", over)
    assert (e.value.method, e.value.reply, e.value.ignore, e.value.length) == ("rukh.close", True, False, 16385)
    # decode_ipc_message checks a reply too when told which method its id answers.
    pending = {"c:1": "rukh.initialize"}
    assert isinstance(r.decode_ipc_message(over), r.SuccessResponse)
    assert isinstance(r.decode_ipc_message(fits, answers=pending.get), r.SuccessResponse)
    with pytest.raises(r.MethodFrameTooLarge) as e:
        r.decode_ipc_message(over, answers=pending.get)
    assert e.value.reply is True and e.value.method == "rukh.initialize"


# --- the frame deadline (rukh ipc: incompleteFrameSeconds from the first byte) --------


def test_frame_deadline_comes_from_the_contract() -> None:
    r = sdk("rukh")
    assert contract("rukh")["channels"]["ipc"]["framing"]["frameDeadline"] == "incompleteFrameSeconds"
    assert r.IPC_FRAME_DEADLINE == ("incompleteFrameSeconds", r.INCOMPLETE_FRAME_SECONDS) and r.INCOMPLETE_FRAME_SECONDS == 2.0
    assert not hasattr(sdk("kernel"), "CONTROL_FRAME_DEADLINE")


def test_incomplete_frame_blocking_socket() -> None:
    r = sdk("rukh")
    a, b = pair()
    with a, b:
        a.sendall((20).to_bytes(4, "big") + b'{"jsonrpc":"2.0"')  # 16 of the 20 announced bytes
        t0 = time.monotonic()
        with pytest.raises(r.FrameIncomplete) as e:
            r.read_ipc_frame(b)
        took = time.monotonic() - t0
        assert r.INCOMPLETE_FRAME_SECONDS - 0.05 <= took < r.INCOMPLETE_FRAME_SECONDS + 1.5, took
        assert (e.value.limit, e.value.seconds, e.value.received) == ("incompleteFrameSeconds", 2.0, 20)
        assert isinstance(e.value, r.FrameError)
        assert b.gettimeout() == 5  # the socket's own timeout is back


def test_socket_timeout_shorter_than_the_deadline_stays_the_callers() -> None:
    r = sdk("rukh")
    a, b = pair()
    with a, b:
        b.settimeout(0.2)
        a.sendall(b"\x00\x00")
        with pytest.raises(TimeoutError) as e:
            r.read_ipc_frame(b)
        assert not isinstance(e.value, r.FrameIncomplete)
        assert b.gettimeout() == 0.2


def test_deadline_runs_from_the_first_byte_and_progress_does_not_reset_it() -> None:
    import contract_runtime as rt

    r = sdk("rukh")
    short = rt.FrameDeadline("incompleteFrameSeconds", 0.5)
    frame = (7).to_bytes(4, "big") + b'{"a":1}'
    a, b = pair()
    with a, b:
        # Idle before the first byte is not an incomplete frame.
        t = threading.Timer(0.8, lambda: a.sendall(frame))
        t.start()
        assert rt.read_prefixed(b, 4, "big", r.FRAME_PAYLOAD_MAX, short) == b'{"a":1}'
        t.join()

        # One byte every 0.1 s: steady progress, but the whole frame needs 1.1 s.
        def trickle() -> None:
            for i in range(len(frame)):
                a.sendall(frame[i:i + 1])
                time.sleep(0.1)

        t2 = threading.Thread(target=trickle)
        t2.start()
        with pytest.raises(rt.FrameIncomplete) as e:
            rt.read_prefixed(b, 4, "big", r.FRAME_PAYLOAD_MAX, short)
        assert 2 <= e.value.received < len(frame)
        t2.join()


def test_incomplete_frame_asyncio() -> None:
    import contract_runtime as rt

    r = sdk("rukh")

    async def main() -> None:
        a, b = socket.socketpair()
        ra, wa = await asyncio.open_unix_connection(sock=a)
        rb, wb = await asyncio.open_unix_connection(sock=b)
        # Whole frames, merged in one write, pass.
        wa.write(rt.prefixed(b'{"x":1}', 4, "big", r.FRAME_PAYLOAD_MAX) * 2)
        await wa.drain()
        assert await r.read_ipc_frame_async(rb) == b'{"x":1}'
        assert await r.read_ipc_frame_async(rb) == b'{"x":1}'
        # Trickling with a shortened deadline: progress does not reset it.
        short = rt.FrameDeadline("incompleteFrameSeconds", 0.5)
        frame = (7).to_bytes(4, "big") + b'{"a":1}'

        async def trickle() -> None:
            for i in range(len(frame)):
                wa.write(frame[i:i + 1])
                await wa.drain()
                await asyncio.sleep(0.1)

        task = asyncio.create_task(trickle())
        with pytest.raises(rt.FrameIncomplete) as e:
            await rt.read_prefixed_async(rb, 4, "big", r.FRAME_PAYLOAD_MAX, short)
        assert 2 <= e.value.received < len(frame)
        await task
        wa.close()
        wb.close()
        # The real deadline, through the public reader: 3 bytes of a frame, then nothing.
        a, b = socket.socketpair()
        ra, wa = await asyncio.open_unix_connection(sock=a)
        rb, wb = await asyncio.open_unix_connection(sock=b)
        wa.write(b"\x00\x00\x00")
        await wa.drain()
        t0 = time.monotonic()
        with pytest.raises(r.FrameIncomplete) as e2:
            await r.read_ipc_frame_async(rb)
        took = time.monotonic() - t0
        assert r.INCOMPLETE_FRAME_SECONDS - 0.05 <= took < r.INCOMPLETE_FRAME_SECONDS + 1.5, took
        assert (e2.value.limit, e2.value.received) == ("incompleteFrameSeconds", 3)
        wa.close()
        wb.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_kernel_control_refuses_null_anywhere() -> None:
    """The control channel says noNull (K-22): a null is refused by its own rule, with
    its JSON pointer, where msgspec alone would keep it."""
    k = sdk("kernel")
    assert k.CONTROL_JSON_RULES.no_null
    event = {"v": 1, "type": "event", "id": "e", "timestamp": 1.5, "trace_id": "t", "method": "ping"}
    with pytest.raises(k.DecodeFailure) as e:
        k.decode_control_message(json.dumps({**event, "payload": {"a": {"b": [1, None]}}}).encode())
    assert e.value.label == "parse" and e.value.rule == "null", e.value
    assert "/payload/a/b/1" in e.value.detail
    assert k.decode_control_message(json.dumps({**event, "payload": {"a": {"b": [1, 2]}}}).encode())


# The series bound (`below`) is contractgen's to compute (codegen/src/package.rs, tested there).
@pytest.mark.parametrize(
    ("installed", "wanted", "below", "ok"),
    [
        ("0.1.0", "0.1.0", "0.2", True),
        ("0.1.4", "0.1.2", "0.2", True),
        ("0.1.2", "0.1.4", "0.2", False),  # older than the SDK needs
        ("0.2.0", "0.1.0", "0.2", False),  # another 0.x series
        ("1.3.0", "1.1.0", "2", True),
        ("2.0.0", "1.1.0", "2", False),  # another major
    ],
)
def test_an_sdk_refuses_a_runtime_it_was_not_generated_for(
    monkeypatch: pytest.MonkeyPatch, installed: str, wanted: str, below: str, ok: bool
) -> None:
    import contract_runtime as rt

    monkeypatch.setattr(rt, "__version__", installed)
    if ok:
        rt.require(wanted, below, "some_sdk.mod")
        return
    with pytest.raises(ImportError) as e:
        rt.require(wanted, below, "some_sdk.mod")
    assert "some_sdk.mod" in str(e.value) and installed in str(e.value) and wanted in str(e.value)


def test_every_generated_module_checks_its_runtime_on_import() -> None:
    import importlib.util
    import re

    import contract_runtime as rt

    for name in ("kernel", "rukh"):
        src = importlib.util.find_spec(f"contract_sdk.{name}")
        assert src is not None and src.origin is not None
        text = open(src.origin, encoding="utf-8").read()
        call = re.search(r'_rt\.require\("([0-9.]+)", "([0-9.]+)", __name__\)', text)
        assert call is not None, name
        # Generated for this very runtime, whose version lies in the range it checks.
        assert call.group(1) == rt.__version__
        rt.require(call.group(1), call.group(2), name)


def test_a_member_typed_by_an_untagged_union_of_structs_is_validated_and_typed() -> None:
    # MCP's EmbeddedResource.resource and ReadResourceResult.contents are
    # TextResourceContents | BlobResourceContents, told apart by which members are present:
    # msgspec cannot type them, so the struct picks the branch after decoding.
    m = sdk("mcp")
    ok = m.decode(m.EmbeddedResource, b'{"type":"resource","resource":{"uri":"u","text":"t"}}')
    assert isinstance(ok.resource, m.TextResourceContents)
    blob = m.decode(m.ReadResourceResult, b'{"contents":[{"uri":"u","blob":"AA=="}]}')
    assert [type(c) for c in blob.contents] == [m.BlobResourceContents]
    with pytest.raises(m.DecodeFailure) as e:
        m.decode(m.EmbeddedResource, b'{"type":"resource","resource":{"text":"t"}}')
    assert e.value.label == "missing-field"
    with pytest.raises(m.DecodeFailure) as e:
        m.decode(m.ReadResourceResult, b'{"contents":[1]}')
    assert e.value.label == "wrong-type"
    # Built in code, a branch value stays as it is and encodes as the wire has it. (The
    # content union's branches are all structs since ResourceLink's allOf is read, so the
    # union is tagged by `type`, which msgspec then writes itself.)
    made = m.EmbeddedResource(resource=m.TextResourceContents(uri="u", text="t"))
    assert m.encode(made) == b'{"type":"resource","resource":{"uri":"u","text":"t"}}'


def test_a_member_typed_by_an_alias_of_a_list_of_untagged_unions_is_typed_too() -> None:
    # The jobs fixture's Bundle.sources is `Sources`, an alias of a list of Source
    # (FileSource | UrlSource, told apart by which member is present): the struct follows
    # the alias and picks each element's branch, as it does for a list typed in place.
    m = sdk("jobs")
    ok = m.decode(m.Bundle, b'{"sources":[{"path":"a.txt"},{"url":"https://x/b"}]}')
    assert [type(x) for x in ok.sources] == [m.FileSource, m.UrlSource]
    with pytest.raises(m.DecodeFailure):
        m.decode(m.Bundle, b'{"sources":[{"neither":1}]}')
    assert m.encode(ok) == b'{"sources":[{"path":"a.txt"},{"url":"https://x/b"}]}'


def test_a_tagged_struct_outside_its_union_still_requires_its_tag() -> None:
    # toolchannel's ReleaseResult.outputs is a list of ResourceLink, a branch of the content
    # union tagged by `type`. On its own msgspec takes a tagged struct without its tag; the
    # contract's `const` makes the tag required wherever the struct appears.
    m = sdk("toolchannel")
    head = b'{"accepted":true,"outputsFlushed":true,"outputs":['
    ok = m.decode(m.ReleaseResult, head + b'{"type":"resource_link","uri":"store://a"}]}')
    assert isinstance(ok.outputs[0], m.ResourceLink) and ok.outputs[0].uri == "store://a"
    assert m.encode(ok) == head + b'{"type":"resource_link","uri":"store://a"}]}'
    with pytest.raises(m.DecodeFailure) as missing:
        m.decode(m.ReleaseResult, head + b'{"uri":"store://a"}]}')
    assert missing.value.label == "missing-field"
    with pytest.raises(m.DecodeFailure) as other:
        m.decode(m.ReleaseResult, head + b'{"type":"text","uri":"store://a"}]}')
    assert other.value.label == "bad-literal"


def test_a_union_of_structs_and_arrays_is_picked_by_kind() -> None:
    # MCP 2025-03-26's JSONRPCMessage is one message or a batch: an array of requests and
    # notifications, or one of responses and errors. msgspec cannot hold such a union; the
    # module picks by the value's JSON kind, tries the array branches in order, and picks each
    # element by its members (the corpus examples 07 and 08 are the same values as vectors).
    m = sdk("mcp_2025_03_26")
    one = m.decode_jsonrpc_message(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    assert isinstance(one, m.JsonrpcRequest)
    batch = m.decode_jsonrpc_message(b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]')
    assert [type(x) for x in batch] == [m.JsonrpcRequest, m.JsonrpcNotification]
    answers = m.decode_jsonrpc_message(b'[{"jsonrpc":"2.0","id":1,"result":{}}]')
    assert [type(x) for x in answers] == [m.JsonrpcResponse]
    with pytest.raises(m.DecodeFailure) as kind:
        m.decode_jsonrpc_message(b'"ping"')
    assert kind.value.label == "wrong-type"
    with pytest.raises(m.DecodeFailure) as neither:
        m.decode_jsonrpc_message(b'[{"id":1}]')
    assert neither.value.label == "missing-field"


def test_an_invalid_request_is_not_taken_for_a_notification() -> None:
    # JSON-RPC's message union picks Request by its id and method; a request whose id is
    # not a RequestId (string or integer) is refused, never passed on as the open
    # notification branch (issue 18's example).
    m = sdk("mcp")
    with pytest.raises(m.DecodeFailure) as e:
        m.decode_stdio_message(b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}')
    assert e.value.label == "wrong-type"
