"""Machine vectors: each typed state machine steps on its events and messages exactly as
`contractgen vectors` says (computed from the reading the proxy's policy engine runs)."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import MODULES, load_doc, sdk


def machine(module: str, key: str) -> tuple[Any, Any, Any, Any]:
    found: tuple[Any, Any, Any, Any] = sdk(module).MACHINES[key]
    return found


@pytest.mark.parametrize("module", MODULES)
def test_message_steps(module: str) -> None:
    vectors = load_doc(module, "machines")["messages"]
    for v in vectors:
        state_t, event_t, _, on_message = machine(module, v["machine"])
        got = on_message(state_t(v["state"]), v["from"], v["kind"], v["method"], v["message"])
        assert got.step == v["expect"], f"{v['id']}: {got!r}"
        if v["expect"] == "moved":
            assert got.to == state_t(v["to"]), f"{v['id']}: {got!r}"
            assert got.event == event_t(v["event"]), f"{v['id']}: {got!r}"
        if v["expect"] == "out-of-place":
            assert got.ignorable == v["ignorable"], f"{v['id']}: {got!r}"


@pytest.mark.parametrize("module", MODULES)
def test_event_steps(module: str) -> None:
    import contract_runtime as _runtime

    for v in load_doc(module, "machines")["events"]:
        state_t, event_t, on, _ = machine(module, v["machine"])
        if v["to"] is None:
            with pytest.raises(_runtime.InvalidEvent) as info:
                on(state_t(v["state"]), event_t(v["event"]))
            assert info.value.ignorable == v["ignorable"], v["id"]
        else:
            assert on(state_t(v["state"]), event_t(v["event"])) == state_t(v["to"]), v["id"]


def test_every_typed_machine_has_vectors() -> None:
    """A typed machine the generator skipped would pass the tests above vacuously."""
    for module in MODULES:
        keys = {v["machine"] for v in load_doc(module, "machines")["events"]}
        assert keys == set(sdk(module).MACHINES), module
