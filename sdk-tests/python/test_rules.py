"""Rule vectors: request ids are issued and checked, and keyed rate limits admit and refuse,
exactly as `contractgen vectors` says (computed from what the proxy's policy engine runs)."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import MODULES, load_doc, sdk
from test_vectors import same_json


@pytest.mark.parametrize("module", MODULES)
def test_ids(module: str) -> None:
    import contract_runtime as _runtime

    mod = sdk(module)
    for v in load_doc(module, "rules")["ids"]:
        rules = mod.ID_RULES[v["party"]]
        issuer = _runtime.IdCounter()
        issued = [issuer.next_id(rules) for _ in v["next"]]
        assert same_json(issued, v["next"]), f"{module}/{v['party']}: issued {issued!r}"
        checker = _runtime.IdCounter()
        for a in v["admit"]:
            try:
                checker.admit(rules, a["id"])
                got = "ok"
            except _runtime.IdRuleBroken as e:
                got = e.rule
            assert got == a["expect"], f"{module}/{v['party']}: {a['id']!r} got {got}"


@pytest.mark.parametrize("module", MODULES)
def test_rates(module: str) -> None:
    mod = sdk(module)
    for v in load_doc(module, "rules")["rates"]:
        limiter = mod.RATE_LIMITERS[v["limit"]]()
        got: list[Any] = [
            limiter.take(c["from"], c["method"], c["message"], c["t"], 0, c["size"]) for c in v["calls"]
        ]
        want = [c["expect"] for c in v["calls"]]
        assert got == want, f"{module}/{v['limit']}"


def test_every_rule_has_vectors() -> None:
    """A party or limit the generator skipped would pass the tests above vacuously."""
    for module in MODULES:
        doc = load_doc(module, "rules")
        assert {v["party"] for v in doc["ids"]} == set(sdk(module).ID_RULES), module
        assert {v["limit"] for v in doc["rates"]} == set(sdk(module).RATE_LIMITERS), module
