from decimal import Decimal

import pytest

from webhook.policy.quantity import QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", "1"),
        (1, "1"),
        ("1000m", "1"),
        ("1e0", "1"),
        ("1E0", "1"),
        (1.0, "1"),
        ("0.5", "0.5"),
        (0.5, "0.5"),
        ("500m", "0.5"),
        (".5", "0.5"),
        ("5e-1", "0.5"),
        ("0", "0"),
        ("0.0", "0"),
        ("-0", "0"),
        ("+2", "2"),
        ("1Ki", "1024"),
        ("1k", "1000"),
        ("1500m", "1.5"),
        ("1m", "0.001"),
        ("100u", "0.0001"),
        ("-1", "-1"),
        ("2.", "2"),
    ],
)
def test_parses_every_spelling_exactly(raw: object, expected: str) -> None:
    assert parse_quantity(raw) == Decimal(expected)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "abc",
        "1 ",
        " 1",
        "1.5.0",
        "NaN",
        "nan",
        "Infinity",
        "inf",
        "1x",
        "1KiB",
        "0x10",
        "1e",
        "e3",
        "--1",
        "1e999999",
        True,
        False,
        None,
        [],
        {},
        float("nan"),
        float("inf"),
        "1" * 100,
    ],
)
def test_rejects_what_kubernetes_rejects(raw: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(raw)


def test_string_forms_compare_numerically() -> None:
    assert parse_quantity("1") == parse_quantity("1000m") == parse_quantity(1) == parse_quantity("1e0")
    assert parse_quantity("0.5") == parse_quantity("500m") == parse_quantity(0.5)
