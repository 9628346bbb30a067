"""Properties: the parser fails only with ConfigError, whatever the input, and
:func:`dumps` output reads back to the same value."""

from __future__ import annotations

import datetime as dt

import pytest
from config_seeds import all_seed_blocks
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jetraft.config import ConfigError, config_from_text, dumps, parse_text

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEED_TEXTS = [block.text for block in all_seed_blocks()]

SYNTAX = list("{}[]()=:;,#/\"'\\$ \t\n\r.-+0123456789kKmMbBiIeETZxabc_") + ["include ", "//", "true", "\\x", "\n)"]
fuzz_text = st.lists(st.sampled_from(SYNTAX) | st.characters(), max_size=80).map("".join)


@pytest.fixture(scope="module")
def fuzz_file(tmp_path_factory) -> str:
    """A file name in an empty directory, so that generated includes find nothing."""
    return str(tmp_path_factory.mktemp("fuzz") / "fuzz.conf")


def parses_or_config_error(text: str, filename: str) -> None:
    try:
        parse_text(text, filename, env={"A": "$B", "B": "[$A]", "N": "42"})
    except ConfigError as e:
        assert e.message and e.file and e.line >= 0 and e.column >= 0
        assert str(e).startswith(f"{e.file}:{e.line}:{e.column}: ")


@SETTINGS
@given(st.text(max_size=200))
@example("a = $A")
@example("include " + "x" * 300)
def test_arbitrary_text_raises_only_config_error(fuzz_file, text):
    parses_or_config_error(text, fuzz_file)


@SETTINGS
@given(fuzz_text)
def test_syntax_soup_raises_only_config_error(fuzz_file, text):
    parses_or_config_error(text, fuzz_file)


@st.composite
def mutated_seed(draw) -> str:
    text = draw(st.sampled_from(SEED_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 12)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        piece = draw(st.sampled_from(SYNTAX) | st.characters())
        if action == "insert":
            text = text[:i] + piece + text[i:]
        elif action == "delete":
            text = text[:i] + text[j:]
        elif action == "replace":
            text = text[:i] + piece + text[j:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    return text


@SETTINGS
@given(mutated_seed())
def test_mutated_seed_configurations_raise_only_config_error(fuzz_file, text):
    parses_or_config_error(text, fuzz_file)
    try:
        config_from_text(text, fuzz_file, env={})
    except ConfigError:
        pass


# -- round trip ---------------------------------------------------------------------------------

keys = st.text(max_size=12).filter(lambda k: not ('"' in k and "'" in k))
scalars = (
    st.text(max_size=20)
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31), timezones=st.just(dt.timezone.utc)).map(
        lambda d: d.replace(microsecond=0)
    )
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3), max_leaves=10)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, max_size=5))
@example({"include": "x", "$2a$11$x": "$2a$11$x", "": [], "t": "true", "m": {}, "q": "a\"b'c\\\x00\x7f"})
def test_dumps_reads_back_to_the_same_value(document):
    assert parse_text(dumps(document), env={}) == document


def test_dumps_of_each_seed_block_reads_back():
    for text in SEED_TEXTS:
        tree = parse_text(text, env={})
        assert parse_text(dumps(tree), env={}) == tree
