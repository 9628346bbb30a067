"""Go duration strings (time.ParseDuration) and the configuration writer."""

from __future__ import annotations

import datetime as dt

import pytest

from jetraft.config import dumps, parse_text
from jetraft.config.durations import parse_duration

NS = 1e-9


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0), ("-0", 0.0), ("+0", 0.0), ("5s", 5.0), ("30s", 30.0), ("1478s", 1478.0), ("-5s", -5.0),
        ("+5s", 5.0), ("-0s", 0.0), ("5.0s", 5.0), ("5.6s", 5.6), ("5.s", 5.0), (".5s", 0.5), ("1.004s", 1.004),
        ("100.00100s", 100.001), ("10ns", 10 * NS), ("11us", 11e-6), ("12\u00b5s", 12e-6), ("12\u03bcs", 12e-6),
        ("13ms", 0.013), ("15m", 900.0), ("16h", 57600.0), ("3h30m", 12600.0), ("10.5s4m", 250.5),
        ("-2m3.4s", -123.4), ("1h2m3s4ms5us6ns", 3723.004005006), ("39h9m14.425s", 140_954.425),
        ("52763797000ns", 52.763797), ("0.3333333333333333333h", 1200.0), ("9223372036854775807ns", 9223372036.854775807),
        ("-9223372036854775808ns", -9223372036.854775808), ("0.100000000000000000000h", 360.0),
    ],
)  # fmt: skip
def test_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-15, abs=1e-12)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid duration ''"), ("3", "missing unit in duration '3'"), ("-", "invalid duration '-'"),
        ("s", "invalid duration 's'"), (".", "invalid duration '.'"), ("-.", "invalid duration '-.'"),
        (".s", "invalid duration '.s'"), ("+.s", "invalid duration '+.s'"), ("1d", "unknown unit 'd' in duration '1d'"),
        ("1.5.s", "missing unit in duration '1.5.s'"), ("5 s", "unknown unit ' s' in duration '5 s'"),
        ("9223372036854775808ns", "invalid duration '9223372036854775808ns'"),
        ("9223372036854775.808us", "invalid duration '9223372036854775.808us'"),
        ("9223372036854ms775us808ns", "invalid duration '9223372036854ms775us808ns'"),
        ("3000000h", "invalid duration '3000000h'"),
    ],
)  # fmt: skip
def test_go_duration_errors(text, message):
    with pytest.raises(ValueError) as e:
        parse_duration(text)
    assert str(e.value) == message


def test_dumps_layout():
    text = dumps({"server_name": "n1", "include": "x", "a b": [1, {"k": True}], "empty": {}, "f": 1e20, "when": dt.datetime(2021, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)})
    assert text == (
        'server_name: "n1"\n'
        '"include": "x"\n'
        '"a b": [\n  1\n  {\n    k: true\n  }\n]\n'
        "empty: {}\n"
        "f: 100000000000000000000.0\n"
        "when: 2021-01-02T03:04:05Z\n"
    )
    assert parse_text(text, env={})["f"] == 1e20


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"f": float("nan")}, ValueError),
        ({"f": float("inf")}, ValueError),
        ({"i": 2**63}, ValueError),
        ({"both\"'": 1}, ValueError),
        ({"d": dt.datetime(2021, 1, 1)}, ValueError),
        ({"d": dt.datetime(2021, 1, 1, 0, 0, 0, 5, tzinfo=dt.timezone.utc)}, ValueError),
        ({"s": {1, 2}}, TypeError),
        ({1: "x"}, TypeError),
    ],
)
def test_dumps_rejects_what_the_format_cannot_hold(value, error):
    with pytest.raises(error):
        dumps(value)
