"""The small CEL evaluator the selector tests rely on: CEL's semantics where they matter."""

from __future__ import annotations

import pytest

from tests.deploy import cel

DEV = {
    "name": "d",
    "attributes": {
        "type": {"string": "rdma"},
        "roce": {"bool": True},
        "vfIndex": {"int": 3},
        "other.example.com/x": {"string": "y"},
    },
}
D = 'device.attributes["dra.example.com"]'


VALUE_CASES = [
    ('device.driver == "dra.example.com"', True),
    (f'{D}.type == "rdma"', True),
    (f'{D}["type"] == "rdma"', True),
    (f'{D}.type != "rdma"', False),
    (f'{D}.type in ["netdev", "rdma"]', True),
    (f"{D}.roce == true", True),
    (f"{D}.roce", True),
    (f"!{D}.roce", False),
    (f"{D}.vfIndex == 3", True),
    (f'{D}.vfIndex == "3"', False),
    (f"has({D}.roce)", True),
    (f"has({D}.nope)", False),
    ('device.attributes["other.example.com"].x == "y"', True),
    (f'({D}.type == "netdev" || {D}.type == "rdma") && {D}.roce', True),
    # CEL's && and || absorb an error when the other side decides.
    (f"false && {D}.nope", False),
    (f"{D}.nope && false", False),
    (f"true || {D}.nope", True),
    (f"{D}.nope || true", True),
    ('device.driver == "gpu" && device.attributes["gpu"].model == "x"', False),
]


@pytest.mark.parametrize("expr,want", VALUE_CASES)
def test_values(expr, want):
    assert cel.evaluate(expr, "dra.example.com", DEV) is want


ERROR_CASES = [
    f"{D}.nope",
    f"true && {D}.nope",
    f"{D}.nope == 1",
    'device.attributes["unknown.domain"].x == "y"',
    f"{D}.nope || false",
]


@pytest.mark.parametrize("expr", ERROR_CASES)
def test_errors(expr):
    with pytest.raises(cel.CelError):
        cel.evaluate(expr, "dra.example.com", DEV)


@pytest.mark.parametrize("expr", ["device.capacity", "size(x)", f"{D}.type ==", "1 +"])
def test_outside_the_subset(expr):
    with pytest.raises(cel.CelSyntaxError):
        cel.compile_expr(expr)
