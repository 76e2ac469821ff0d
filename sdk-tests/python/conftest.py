"""Shared fixtures: the generated package is on PYTHONPATH; vectors are in $CONTRACT_VECTORS."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

CONTRACTS = Path(os.environ.get("CONTRACTS_DIR", Path(__file__).resolve().parents[2] / "schema" / "contracts"))
# Every contract the SDK was generated from, so a new contract is tested with no edit here.
MODULES = sorted(p.stem for p in CONTRACTS.glob("*.json"))


def vectors_dir() -> Path:
    d = os.environ.get("CONTRACT_VECTORS")
    if not d:
        pytest.skip("CONTRACT_VECTORS is not set (run sdk-tests/python/run.sh)")
    return Path(d)


def load(module: str, kind: str) -> list[dict[str, Any]]:
    p = vectors_dir() / module / f"{kind}.json"
    with p.open(encoding="utf-8") as f:
        data: list[dict[str, Any]] = json.load(f)
    return data


def load_doc(module: str, name: str) -> dict[str, list[dict[str, Any]]]:
    """A vectors file holding one object of arrays (``machines``, ``rules``)."""
    p = vectors_dir() / module / f"{name}.json"
    with p.open(encoding="utf-8") as f:
        data: dict[str, list[dict[str, Any]]] = json.load(f)
    return data


def sdk(module: str) -> Any:
    return importlib.import_module(f"contract_sdk.{module}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for kind in ("valid", "invalid"):
        arg = f"{kind}_vector"
        if arg in metafunc.fixturenames:
            params = []
            ids = []
            for m in MODULES:
                for v in load(m, kind):
                    params.append((m, v))
                    ids.append(f"{m}:{v['id']}")
            metafunc.parametrize(arg, params, ids=ids)
