"""Malformed configurations: each is rejected with a precise message at a precise place."""

from __future__ import annotations

import pickle

import pytest

from jetraft.config import ConfigError, parse_text
from jetraft.config.lexer import MAX_DEPTH

# (configuration, line, column, message)
MALFORMED = [
    ('a = "abc', 1, 5, 'unterminated double-quoted string: missing closing "'),
    ("a = 'abc\n\n", 1, 5, "unterminated single-quoted string: missing closing '"),
    ('"abc = 1', 1, 1, 'unterminated quoted key: missing closing "'),
    ("m {\n  'k = 1\n}", 2, 3, "unterminated quoted key: missing closing '"),
    ("a {\n  b = 1\n", 1, 3, "unterminated map: '{' has no matching '}'"),
    ("x = 1\na = [1, 2\n", 2, 5, "unterminated array: '[' has no matching ']'"),
    ("{ a = 1\n", 1, 1, "unterminated top-level block: '{' has no matching '}'"),
    ("a = (\n  text\n  )\n", 1, 5, "unterminated block string: '(' needs a ')' alone on a line"),
    ("a = 1\n}", 2, 1, "unexpected '}' with no '{' to close"),
    ("a = 1 }", 1, 7, "unexpected '}' with no '{' to close"),
    ("= 1", 1, 1, "unexpected key separator '=': a key is missing"),
    ("m {\n  : 1\n}", 2, 3, "unexpected key separator ':': a key is missing"),
    ("m {\n  ]\n}", 2, 3, "unexpected ']' where a key was expected"),
    ("/a = 1", 1, 1, "unexpected '/': comments start with '#' or '//'"),
    ("a = [1,,2]", 1, 8, "unexpected ',' in array: an element is missing"),
    ("a = [ 1\n, 2 ]", 2, 1, "unexpected ',' in array: an element is missing"),
    ("a = [1 2]", 1, 8, "expected ',', a new line or ']' after an array element, found '2'"),
    ("a = [;]", 1, 6, "missing array element: found ';'"),
    ("a = 1 b = 2", 1, 7, "expected a new line, ';' or ',' after the value of 'a', found 'b'"),
    ("m {\n  a = 1 b = 2\n}", 2, 9, "expected a new line, ';', ',' or '}' after the value of 'a', found 'b'"),
    ("a = 'x'y", 1, 8, "expected a new line, ';' or ',' after the value of 'a', found 'y'"),
    ("t = 1.5s", 1, 8, "expected a new line, ';' or ',' after the value of 't', found 's'"),
    ("n = 1e5", 1, 7, "expected a new line, ';' or ',' after the value of 'n', found '5'"),
    ("a =\n  1", 1, 4, "missing value for key 'a': found a new line"),
    ("a", 1, 2, "missing value for key 'a': found end of file"),
    ("m { a = }", 1, 9, "missing value for key 'a': found '}'"),
    ("m { a: , b: 1 }", 1, 8, "missing value for key 'a': found ','"),
    ('a = "\\q"', 1, 6, "invalid escape '\\' followed by 'q': only \\xHH, \\t, \\n, \\r, \\\" and \\\\ are allowed"),
    ('a = "\\x4g"', 1, 6, "expected two hexadecimal digits after '\\x', found '4g'"),
    ('a = "\\x4\n"', 1, 6, "expected two hexadecimal digits after '\\x', found the end of the line"),
    ("a = b\\", 1, 6, "invalid escape '\\' followed by the end of the file: only \\xHH, \\t, \\n, \\r, \\\" and \\\\ are allowed"),
    ("a = .5", 1, 5, "floats must start with a digit, found '.'"),
    ("a = ./relative/path", 1, 5, "floats must start with a digit, found '.'"),
    ("a = -.5", 1, 6, "floats must start with a digit, found '.'"),
    ("a = 1.", 1, 7, "a float needs a digit after '.', found end of file"),
    ("a = -x", 1, 6, "expected a digit after '-', found 'x'"),
    ("a = 12-3", 1, 7, "'-' in a number: datetimes must be in full Zulu form YYYY-MM-DDTHH:MM:SSZ"),
    ("a = 2021-01-01\n", 1, 15, "expected 'T' in datetime (YYYY-MM-DDTHH:MM:SSZ), found a new line"),
    ("a = 2021-01-01T10:0x:00Z", 1, 20, "expected a digit in datetime (YYYY-MM-DDTHH:MM:SSZ), found 'x'"),
    ("a = 2021-13-01T00:00:00Z", 1, 5, "invalid datetime '2021-13-01T00:00:00Z': month must be in 1..12"),
    ("a = 2021-02-30T00:00:00Z", 1, 5, "invalid datetime '2021-02-30T00:00:00Z': day is out of range for month"),
    ("a = 1kbb", 1, 5, "invalid size suffix 'kbb' in '1kbb': use k, kb, ki, kib, m, mb, ..., e, eb, ei, eib"),
    ("a = 99999999999999999999", 1, 5, "integer '99999999999999999999' is out of range (64-bit signed)"),
    ("a = 9999999999999999e", 1, 5, "integer '9999999999999999e' is out of range (64-bit signed)"),
    ("a = 1" + "0" * 400 + ".5", 1, 5, f"float '1{'0' * 400}.5' is out of range"),
    ("x {\n  y = $nope\n}", 2, 7, "undefined variable $nope: no key 'nope' in an enclosing map and no environment variable 'nope'"),
    ("include\nx = 1", 1, 8, "include needs a file name, found a new line"),
    ("include [a]", 1, 9, "include needs a file name, found '['"),
    ('include "x.conf', 1, 9, 'unterminated quoted include path: missing closing "'),
    ("a = " + "[" * (MAX_DEPTH + 5), 1, 4 + MAX_DEPTH + 1, f"nesting deeper than {MAX_DEPTH} levels"),
]


@pytest.mark.parametrize(("text", "line", "column", "message"), MALFORMED)
def test_malformed_configuration(text, line, column, message):
    with pytest.raises(ConfigError) as e:
        parse_text(text, "bad.conf", env={})
    assert (e.value.message, e.value.file, e.value.line, e.value.column) == (message, "bad.conf", line, column)
    assert str(e.value) == f"bad.conf:{line}:{column}: {message}"


def test_corpus_is_large_and_distinct():
    assert len(MALFORMED) >= 20
    assert len({text for text, *_ in MALFORMED}) == len(MALFORMED)


def test_nesting_through_variables_is_bounded():
    lines = ["v0 = 1"] + [f"v{i} = [$v{i - 1}]" for i in range(1, MAX_DEPTH + 2)]
    with pytest.raises(ConfigError) as e:
        parse_text("\n".join(lines), env={})
    assert e.value.message == f"nesting deeper than {MAX_DEPTH} levels"
    assert e.value.line == MAX_DEPTH + 1


def test_config_error_shape():
    err = ConfigError("boom", "f.conf", 3, 7)
    assert (err.message, err.file, err.line, err.column) == ("boom", "f.conf", 3, 7)
    assert str(err) == "f.conf:3:7: boom"
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.message, copy.file, copy.line, copy.column) == ("boom", "f.conf", 3, 7)
    assert isinstance(err, Exception)


def test_an_include_path_with_a_nul_byte_is_a_config_error():
    with pytest.raises(ConfigError, match="a path cannot contain a NUL byte") as info:
        parse_text("port: 4222\ninclude a\0b\n")
    assert (info.value.line, info.value.column) == (2, 9)
