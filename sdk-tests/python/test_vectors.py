"""Cross-language vectors: valid ones round-trip, invalid ones are rejected with their label."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from conftest import MODULES, load, sdk


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, object member order ignored."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b if isinstance(a, bool) and isinstance(b, bool) else False
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def round_trip(mod: Any, type_name: str, value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False).encode()
    obj = mod.decode_named(type_name, text)
    again = json.loads(mod.encode(obj))
    assert same_json(again, value), f"{type_name}: {again!r} != {value!r}"
    # Decoding the re-encoded text gives an equal object.
    assert mod.encode(mod.decode_named(type_name, mod.encode(obj))) == mod.encode(obj)


def test_valid(valid_vector: tuple[str, dict[str, Any]]) -> None:
    module, v = valid_vector
    mod = sdk(module)
    if v["messageType"] is not None:
        round_trip(mod, v["messageType"], v["message"])
    if v["payloadType"] is not None:
        round_trip(mod, v["payloadType"], v["payload"])


def test_invalid(invalid_vector: tuple[str, dict[str, Any]]) -> None:
    module, v = invalid_vector
    mod = sdk(module)
    with pytest.raises(mod.DecodeFailure) as info:
        mod.decode_named(v["type"], v["text"].encode())
    assert info.value.label == v["error"], f"{v['id']}: {info.value}"


@pytest.mark.parametrize("module", MODULES)
def test_every_label_is_known(module: str) -> None:
    import contract_runtime as _runtime

    for v in load(module, "invalid"):
        assert v["error"] in _runtime.LABELS


@pytest.mark.parametrize("module", MODULES)
def test_every_vector_type_is_generated(module: str) -> None:
    mod = sdk(module)
    for v in load(module, "valid"):
        for key in ("messageType", "payloadType"):
            if v[key] is not None:
                assert v[key] in mod.TYPES
    for v in load(module, "invalid"):
        assert v["type"] in mod.TYPES


def test_jsonrpc_dispatch_picks_branch_by_members() -> None:
    for module, names in (
        ("rukh", ("Request", "Notification", "SuccessResponse", "ErrorResponse")),
        ("toolchannel", ("JsonRpcRequest", "JsonRpcNotification", "JsonRpcResponse", "JsonRpcErrorResponse")),
    ):
        mod = sdk(module)
        rid = '"c:1"' if module == "rukh" else "1"
        req, note, ok, err = (getattr(mod, n) for n in names)
        decode = mod.DISPATCH[next(iter(mod.DISPATCH))]
        assert isinstance(decode(b'{"jsonrpc":"2.0","id":%s,"method":"m","params":{}}' % rid.encode()), req)
        assert isinstance(decode(b'{"jsonrpc":"2.0","method":"m"}'), note)
        assert isinstance(decode(b'{"jsonrpc":"2.0","id":%s,"result":{}}' % rid.encode()), ok)
        assert isinstance(decode(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}'), err)
        with pytest.raises(mod.DecodeFailure) as e:
            decode(b'{"jsonrpc":"1.0","method":"m"}')
        assert e.value.label == "bad-literal"
        with pytest.raises(mod.DecodeFailure) as e:
            decode(b'[1]')
        assert e.value.label == "wrong-type"


def test_tagged_union_requires_tag() -> None:
    k = sdk("kernel")
    with pytest.raises(k.DecodeFailure) as e:
        k.decode_named("Message", b'{"v":1,"id":"a","timestamp":1,"trace_id":"t","method":"m","payload":{}}')
    assert e.value.label == "missing-field"
    with pytest.raises(k.DecodeFailure) as e:
        k.decode_named("Message", b'{"v":1,"type":"nope","id":"a","timestamp":1,"trace_id":"t","payload":{}}')
    assert e.value.label == "bad-literal"
    x = sdk("xsession")
    with pytest.raises(x.DecodeFailure) as e:
        x.decode(x.AuthLine, b'{"msgV":1,"token":"t"}')
    assert e.value.label == "missing-field"


def test_open_struct_keeps_unknown_members() -> None:
    x = sdk("xsession")
    text = b'{"msgV":1,"type":"user","msgId":"m1","message":{"role":"user","content":"hi","x-extra":[1]}}'
    env = x.decode(x.FrameEnvelope, text)
    assert env.msg_v == 1 and env.type == "user"
    assert x.extra_members(env)["msgId"] == "m1"
    assert json.loads(x.encode(env)) == json.loads(text)
    frame = x.decode_named("InboxFrame", text)
    assert isinstance(frame, x.UserFrame)
    assert x.extra_members(frame.message) == {"x-extra": [1]}
    assert json.loads(x.encode(frame)) == json.loads(text)


def test_closed_struct_rejects_unknown_members() -> None:
    r = sdk("rukh")
    with pytest.raises(r.DecodeFailure) as e:
        r.decode(r.CloseParams, b'{"sessionId":"s","zz":1}')
    assert e.value.label == "unknown-field"


def test_absent_optional_stays_absent() -> None:
    r = sdk("rukh")
    p = r.decode(r.CloseParams, b"{}")
    assert p.session_id is msgspec.UNSET
    assert r.encode(p) == b"{}"


def test_parse_errors() -> None:
    k = sdk("kernel")
    for bad in (b"", b"{", b"{} x", b"\xff"):
        with pytest.raises(k.DecodeFailure) as e:
            k.decode_named("Message", bad)
        assert e.value.label == "parse"
