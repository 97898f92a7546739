"""Exact parsing of Kubernetes resource quantities.

The API server hands built-in objects over in canonical form ("500m", "1"), but custom
resources and offline manifests carry whatever the user typed: "1000m", 1e0, JSON numbers.
Comparing strings would call "1" and "1000m" different, so every comparison goes through
`Decimal`, which is exact for every spelling the Go parser accepts.
"""

from __future__ import annotations

import re
from decimal import Decimal, localcontext
from functools import lru_cache

# The grammar from k8s.io/apimachinery/pkg/api/resource/quantity.go:
#   <quantity> ::= <signedNumber><suffix>
#   <suffix>   ::= <binarySI> | <decimalExponent> | <decimalSI>
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exp>[+-]?[0-9]+))?$"
)

_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}

# Quantities in Go are bounded (int64 scaled values); an exponent beyond this is an attack
# or a typo, and refusing it keeps Decimal arithmetic cheap.
_MAX_EXPONENT = 30
_MAX_LENGTH = 64


class QuantityError(ValueError):
    """A value that the Kubernetes quantity parser would reject."""


def parse_quantity(value: object) -> Decimal:
    """Return the exact numeric value of a quantity given as a string or a JSON number.

    Raises QuantityError for anything Kubernetes would not accept, including booleans
    (Python treats True as 1) and NaN/Infinity (which `Decimal()` would happily accept).
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is a boolean, not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a finite number")
        return _parse_text(repr(value))
    if isinstance(value, str):
        return _parse_text(value)
    raise QuantityError(f"expected a string or number, got {type(value).__name__}")


@lru_cache(maxsize=1024)
def _parse_text(text: str) -> Decimal:
    # Cached: the same handful of spellings ("1", "500m") arrive on every request.
    if len(text) > _MAX_LENGTH:
        raise QuantityError("quantity is too long")
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a valid quantity (examples: 1, 2, 0.5, 500m)")
    number = Decimal(match["num"])
    exp = match["exp"]
    with localcontext() as ctx:
        ctx.prec = 80
        if exp is not None:
            exponent = int(exp)
            if abs(exponent) > _MAX_EXPONENT:
                raise QuantityError(f"{text!r} has an exponent out of range")
            number = number.scaleb(exponent)
        else:
            number = number * _SUFFIX[match["suffix"] or ""]
        if match["sign"] == "-":
            number = -number
        return number + 0  # normalise -0 and apply the context


def describe(value: object) -> str:
    """Render a raw value for a message the way the user wrote it."""
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"  # as the YAML or JSON the user wrote spells it
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "an object"
    return "a list" if isinstance(value, list) else type(value).__name__
