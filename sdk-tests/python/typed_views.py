"""What a type checker sees of the generated SDK: a member keeps the type its contract gives
it, through aliases and the names the module uses to keep msgspec exact (run.sh runs
``mypy --strict`` on this file; pytest does not collect it)."""

from __future__ import annotations

from typing import Union, assert_type

from contract_sdk import jobs, toolchannel


def views(bundle: jobs.Bundle, release: toolchannel.ReleaseResult) -> None:
    # An alias of a list of a union decoded by presence: the union, not Any.
    assert_type(bundle.sources, list[Union[jobs.FileSource, jobs.UrlSource]])
    # A tagged struct outside its union: the struct (at run time its tag stays required).
    assert_type(release.outputs, list[toolchannel.ResourceLink])
