"""Numbers typed by an operator, in an environment variable or on the command line.

Python's int() and float() accept more than an operator means: full-width digits (`３０`), digit separators
(`3_0`), `nan`, `inf` and exponents. A retention job that deletes rows takes a typo for a typo, so only plain
ASCII digits count.
"""

import re

WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
DECIMAL_NUMBER = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?")


def whole_number(text: str) -> int:
    text = text.strip()
    if not WHOLE_NUMBER.fullmatch(text):
        raise ValueError(f"not a whole number in plain digits: {text!r}")
    return int(text)


def decimal_number(text: str) -> float:
    text = text.strip()
    if not DECIMAL_NUMBER.fullmatch(text):
        raise ValueError(f"not a decimal number in plain digits: {text!r}")
    return float(text)
