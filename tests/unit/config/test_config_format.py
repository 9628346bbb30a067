"""The NATS configuration format, feature by feature (nats-server conf/lex.go, conf/parse.go)."""

from __future__ import annotations

import datetime as dt

import pytest

from jetraft.config import ConfigError, parse_text
from jetraft.config.errors import Position
from jetraft.config.lexer import TokenKind, tokenize
from jetraft.config.parser import parse_tree


def parse(text: str, **env: str) -> dict:
    return parse_text(text, env=env)


# -- keys, separators, structure ---------------------------------------------------------


@pytest.mark.parametrize("text", ["foo = 2", "foo: 2", "foo 2", "foo=2", "foo:2", "foo\t2", "foo   =   2", "foo\n= 2"])
def test_key_value_separators(text):
    assert parse(text) == {"foo": 2}


@pytest.mark.parametrize(
    "text",
    [
        "cluster { name = C1 }",
        "cluster: { name: C1 }",
        "cluster = {name=C1}",
        "cluster {\n  name: C1\n}",
        "cluster\n{\n  name\n  C1\n}",
        "cluster { name: C1, }",
        "cluster { name: C1; }",
    ],
)
def test_maps_with_or_without_separator(text):
    assert parse(text) == {"cluster": {"name": "C1"}}


def test_map_value_may_start_on_a_later_line_but_top_level_value_may_not():
    assert parse("m {\n  a =\n    1\n}") == {"m": {"a": 1}}
    with pytest.raises(ConfigError, match="missing value for key 'a': found a new line"):
        parse("a =\n  1")


@pytest.mark.parametrize("text", ["{ a: 1, b: 2 }", "{\n a: 1\n b: 2\n}", "{a=1;b=2}", '{"a": 1, "b": 2}', "{ {a: 1}\n b: 2 }"])
def test_optional_top_level_braces(text):
    assert parse(text) == {"a": 1, "b": 2}


def test_json_document_is_a_valid_configuration():
    text = '{"server_name": "n1", "cluster": {"routes": ["nats://a:1", "nats://b:2"], "port": 6222}, "debug": true}'
    assert parse(text) == {
        "server_name": "n1",
        "cluster": {"routes": ["nats://a:1", "nats://b:2"], "port": 6222},
        "debug": True,
    }


@pytest.mark.parametrize("terminator", ["\n", ";", ",", "\r\n", " # comment\n", " // comment\n", ";\n"])
def test_top_level_values_end_at_newline_semicolon_comma_or_comment(terminator):
    assert parse(f"a = 1{terminator}b = two{terminator}c = 'x'{terminator}") == {"a": 1, "b": "two", "c": "x"}


def test_quoted_keys_keep_every_character_and_do_not_escape():
    text = '"with space" = 1\n\'single: key\' = 2\n"a=b" = 3\nm { "x y" = 4, \'#z\' = 5 }\n"\\t" = 6'
    assert parse(text) == {"with space": 1, "single: key": 2, "a=b": 3, "m": {"x y": 4, "#z": 5}, "\\t": 6}


def test_bare_keys_may_hold_dollar_dots_and_dashes():
    assert parse("accounts { $SYS { users = [] } }\nfoo.bar-baz = 1") == {
        "accounts": {"$SYS": {"users": []}},
        "foo.bar-baz": 1,
    }


def test_redefined_key_keeps_last_value():
    assert parse("a = 1\nb = 2\na = 3") == {"b": 2, "a": 3}
    assert list(parse("a = 1\nb = 2\na = 3")) == ["b", "a"]


def test_keys_are_case_sensitive_in_the_tree():
    assert parse("Port = 1\nport = 2") == {"Port": 1, "port": 2}


def test_empty_document_and_comment_only_document():
    assert parse("") == {}
    assert parse("  \n\t\n# nothing\n// here\n") == {}


# -- comments ------------------------------------------------------------------------------


def test_comments_everywhere():
    text = """
    # hash comment
    // slash comment
    a = 1 # trailing
    b = 2 // trailing
    m {  # after brace
      # inside
      c = 3  // trailing in map
    }
    arr = [ # after bracket
      1, # first
      // between
      2  # last
    ]
    """
    assert parse(text) == {"a": 1, "b": 2, "m": {"c": 3}, "arr": [1, 2]}


def test_hash_and_slashes_inside_bare_and_quoted_values_are_not_comments():
    assert parse("url = nats://host:4222\npass = ab#cd\nq = 'x # y'\nr = \"// z\"") == {
        "url": "nats://host:4222",
        "pass": "ab#cd",
        "q": "x # y",
        "r": "// z",
    }


# -- arrays -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["a = [1, 2, 3]", "a = [1,2,3]", "a = [\n  1\n  2\n  3\n]", "a = [1, 2, 3,]", "a = [ 1,\n 2 ,3 ]", "a: [1\n\n2\n3]"],
)
def test_array_separators(text):
    assert parse(text) == {"a": [1, 2, 3]}


def test_mixed_and_nested_arrays():
    assert parse("a = [1, 'two', three, true, 4.5, [6, [7]], {eight: 8}, -9, []]") == {
        "a": [1, "two", "three", True, 4.5, [6, [7]], {"eight": 8}, -9, []]
    }


def test_array_of_maps_like_users():
    text = """users = [
      { user: "a", pass: "x" }
      { user: b
        pass: y
      }
    ]"""
    assert parse(text) == {"users": [{"user": "a", "pass": "x"}, {"user": "b", "pass": "y"}]}


def test_array_of_route_urls_and_paths():
    assert parse("r = [nats://a:1, nats-route://b:2]\np = [/var/lib/x, rel/y]") == {
        "r": ["nats://a:1", "nats-route://b:2"],
        "p": ["/var/lib/x", "rel/y"],
    }


# -- strings -------------------------------------------------------------------------------


def test_double_quoted_escapes_as_lex_go():
    assert parse(r'a = "tab\there\nline\r\"q\" back\\slash \x41\x42 \xc3\xa9"') == {
        "a": 'tab\there\nline\r"q" back\\slash AB é'
    }


def test_single_quoted_strings_are_raw():
    assert parse(r"a = 'no \t escapes \x41 $VAR \" here'") == {"a": r"no \t escapes \x41 $VAR \" here"}


def test_quoted_strings_may_span_lines():
    assert parse('a = "one\ntwo"\nb = \'three\nfour\'') == {"a": "one\ntwo", "b": "three\nfour"}


def test_bare_strings_end_at_whitespace_and_terminators_and_take_escapes():
    assert parse("a = hello\nb = x;c = y,d = z\ne = tab\\tbed") == {
        "a": "hello",
        "b": "x",
        "c": "y",
        "d": "z",
        "e": "tab\tbed",
    }


def test_block_strings_end_at_a_parenthesis_alone_on_a_line():
    text = "numbers (\n  12(34)56\n  (\n    7890\n  )\n)\nafter = 1"
    assert parse(text) == {"numbers": "\n  12(34)56\n  (\n    7890\n  )\n", "after": 1}
    assert parse("b (\nx\n)") == {"b": "\nx\n"}


# -- booleans and numbers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "value"),
    [("true", True), ("TRUE", True), ("yes", True), ("Yes", True), ("on", True), ("ON", True),
     ("false", False), ("False", False), ("no", False), ("NO", False), ("off", False), ("Off", False)],
)  # fmt: skip
def test_booleans_bare_any_case(word, value):
    assert parse(f"b = {word}") == {"b": value}


def test_quoted_or_escaped_booleans_are_strings():
    assert parse("a = 'true'\nb = \"no\"\nc = tru\\x65\nd = truth") == {"a": "true", "b": "no", "c": "true", "d": "truth"}


def test_integers_negative_and_floats():
    assert parse("a = 0\nb = 42\nc = -17\nd = 3.25\ne = -0.5\nf = 9223372036854775807\ng = -9223372036854775808") == {
        "a": 0,
        "b": 42,
        "c": -17,
        "d": 3.25,
        "e": -0.5,
        "f": 2**63 - 1,
        "g": -(2**63),
    }


@pytest.mark.parametrize(
    ("lexeme", "value"),
    [
        ("1k", 1000), ("1K", 1000), ("1kb", 1024), ("1KB", 1024), ("1ki", 1024), ("1kib", 1024), ("1KiB", 1024),
        ("2m", 2_000_000), ("2mb", 2 * 2**20), ("2mi", 2 * 2**20), ("2mib", 2 * 2**20),
        ("3g", 3 * 10**9), ("3gb", 3 * 2**30), ("3gi", 3 * 2**30), ("3gib", 3 * 2**30),
        ("4t", 4 * 10**12), ("4tb", 4 * 2**40), ("5p", 5 * 10**15), ("5pb", 5 * 2**50),
        ("6e", 6 * 10**18), ("7eb", 7 * 2**60), ("-1k", -1000), ("64MB", 64 * 2**20),
    ],
)  # fmt: skip
def test_size_suffixes_as_parse_go(lexeme, value):
    assert parse(f"size = {lexeme}") == {"size": value}


def test_size_suffix_value_keeps_its_lexeme():
    entry = parse_tree("d = 2m", env={}).data["d"]
    assert (entry.value.data, entry.value.raw) == (2_000_000, "2m")


@pytest.mark.parametrize(
    ("lexeme", "value"),
    [("127.0.0.1", "127.0.0.1"), ("127.0.0.1:4222", "127.0.0.1:4222"), ("0.0.0.0:6222", "0.0.0.0:6222"),
     ("localhost:6222", "localhost:6222"), ("5s", "5s"), ("1h30m", "1h30m"), ("100ms", "100ms"), ("2ms", "2ms"),
     ("3com.example", "3com.example"), ("1.2.3", "1.2.3"), (":4222", ":4222"), ("n1-c1", "n1-c1"), ("8080/tcp", "8080/tcp")],
)  # fmt: skip
def test_addresses_and_words_that_start_like_numbers_are_strings(lexeme, value):
    assert parse(f"v = {lexeme}") == {"v": value}


def test_zulu_datetime():
    assert parse("when = 2021-02-05T12:07:34Z") == {"when": dt.datetime(2021, 2, 5, 12, 7, 34, tzinfo=dt.timezone.utc)}


# -- variables ---------------------------------------------------------------------------------


def test_variable_from_enclosing_maps_innermost_first():
    text = """
    x = outer
    m {
      x = inner
      n { y = $x }
      z = $x
    }
    w = $x
    """
    assert parse(text) == {"x": "outer", "m": {"x": "inner", "n": {"y": "inner"}, "z": "inner"}, "w": "outer"}


def test_variable_skips_arrays_and_may_hold_any_value():
    text = "list = [1, 2]\nmap { k: v }\na = [$list, $map]\nb = $map"
    assert parse(text) == {"list": [1, 2], "map": {"k": "v"}, "a": [[1, 2], {"k": "v"}], "b": {"k": "v"}}


def test_variable_must_be_defined_before_use():
    with pytest.raises(ConfigError) as e:
        parse("a = $later\nlater = 1")
    assert (e.value.line, e.value.column) == (1, 5)
    assert e.value.message == (
        "undefined variable $later: no key 'later' in an enclosing map and no environment variable 'later'"
    )


def test_enclosing_map_wins_over_environment():
    assert parse("PORT = 1\np = $PORT", PORT="2") == {"PORT": 1, "p": 1}


@pytest.mark.parametrize(
    ("raw", "value"),
    [("4333", 4333), ("hello", "hello"), ("true", True), ("1.5", 1.5), ("10kb", 10240),
     ("[1, 2]", [1, 2]), ("{ a: 1 }", {"a": 1}), ('"quoted # text"', "quoted # text"), ("", ""), ("  ", "  ")],
)  # fmt: skip
def test_environment_value_is_parsed_as_a_value(raw, value):
    assert parse("v = $V", V=raw) == {"v": value}


def test_environment_chain_resolves():
    assert parse("v = $A", A="$B", B="[$C]", C="7") == {"v": [7]}


@pytest.mark.parametrize(
    ("env", "chain"),
    [({"A": "$A"}, "$A -> $A"), ({"A": "$B", "B": "$A"}, "$A -> $B -> $A"), ({"A": "[1, $B]", "B": "{x: $A}"}, "$A -> $B -> $A")],
)
def test_environment_cycle_is_an_error_at_the_reference(env, chain):
    with pytest.raises(ConfigError) as e:
        parse_text("\n  v = $A", env=env)
    assert e.value.message == f"variable reference cycle: {chain}"
    assert (e.value.file, e.value.line, e.value.column) == ("<string>", 2, 7)


def test_environment_value_that_does_not_parse():
    with pytest.raises(ConfigError) as e:
        parse("v = $BAD", BAD="[1,")
    assert (e.value.line, e.value.column) == (1, 5)
    assert e.value.message == (
        "environment variable 'BAD' (used as $BAD) is not a valid value: "
        "<environment variable BAD>:1:1: unterminated array: '[' has no matching ']'"
    )


def test_environment_value_with_two_words_is_not_a_value():
    with pytest.raises(ConfigError, match=r"expected a new line, ';' or ',' after the value of 'V', found 'b'"):
        parse("v = $V", V="a b")


def test_variables_are_not_expanded_in_quotes():
    assert parse("X = 1\na = \"$X\"\nb = '$X'", X="2") == {"X": 1, "a": "$X", "b": "$X"}


@pytest.mark.parametrize("prefix", ["$2a$", "$2b$", "$2y$"])
def test_bare_bcrypt_hashes_are_literal(prefix):
    hashed = prefix + "11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
    assert parse(f"pass = {hashed}\nq = \"{hashed}\"") == {"pass": hashed, "q": hashed}


def test_variable_marks_its_definition_used():
    tree = parse_tree("PASS = secret\nother = 1\nauth { password: $PASS }", env={})
    assert tree.data["PASS"].value.used
    assert not tree.data["other"].value.used


# -- include ---------------------------------------------------------------------------------


def test_include_merges_at_its_place_relative_to_the_including_file(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "auth.conf").write_text("b = from_auth\nc = from_auth\ninclude 'nested.conf'\n")
    (tmp_path / "conf.d" / "nested.conf").write_text("d = nested\n")
    main = tmp_path / "main.conf"
    main.write_text('a = 1\nb = before\ninclude "conf.d/auth.conf"\nc = after\ne = $d\n')

    assert parse_tree(main.read_text(), str(main), env={}).plain() == {
        "a": 1,
        "b": "from_auth",
        "c": "after",
        "d": "nested",
        "e": "nested",
    }


@pytest.mark.parametrize("statement", ["include inc.conf", "include 'inc.conf'", 'include "inc.conf"', "INCLUDE inc.conf", "include\tinc.conf;"])
def test_include_forms(tmp_path, statement):
    (tmp_path / "inc.conf").write_text("x = 1")
    main = tmp_path / "main.conf"
    assert parse_text(f"m {{\n  {statement}\n}}\n{statement}", str(main), env={}) == {"m": {"x": 1}, "x": 1}


def test_include_relative_to_the_working_directory_for_text(tmp_path, monkeypatch):
    (tmp_path / "inc.conf").write_text("x = 1")
    monkeypatch.chdir(tmp_path)
    assert parse("include inc.conf") == {"x": 1}


def test_key_named_include_directly_followed_by_a_separator_is_a_key():
    assert parse("include=5\ninclude: six") == {"include": "six"}


def test_included_file_does_not_see_the_includers_variables(tmp_path):
    (tmp_path / "inc.conf").write_text("\nw = $v\n")
    main = tmp_path / "main.conf"
    with pytest.raises(ConfigError) as e:
        parse_text("v = 1\ninclude inc.conf", str(main), env={})
    assert (e.value.file, e.value.line, e.value.column) == (str(tmp_path / "inc.conf"), 2, 5)
    assert e.value.message.startswith("undefined variable $v")
    assert e.value.message.endswith(f"(included from {main}:2:9)")


def test_error_in_included_file_names_it(tmp_path):
    (tmp_path / "bad.conf").write_text('ok = 1\nbroken = "no end\n')
    main = tmp_path / "main.conf"
    with pytest.raises(ConfigError) as e:
        parse_text("a = 1\n  include bad.conf\n", str(main), env={})
    assert str(e.value) == (
        f"{tmp_path / 'bad.conf'}:2:10: unterminated double-quoted string: missing closing \" (included from {main}:2:11)"
    )


def test_missing_include(tmp_path):
    main = tmp_path / "main.conf"
    with pytest.raises(ConfigError) as e:
        parse_text("a = 1\ninclude nowhere.conf\n", str(main), env={})
    assert (e.value.file, e.value.line, e.value.column) == (str(main), 2, 9)
    assert e.value.message == f"cannot read include file 'nowhere.conf' ({tmp_path / 'nowhere.conf'}): No such file or directory"


def test_include_cycle(tmp_path):
    (tmp_path / "a.conf").write_text("include b.conf\n")
    (tmp_path / "b.conf").write_text("x = 1\ninclude a.conf\n")
    with pytest.raises(ConfigError) as e:
        parse_tree((tmp_path / "a.conf").read_text(), str(tmp_path / "a.conf"), env={})
    assert (e.value.file, e.value.line, e.value.column) == (str(tmp_path / "b.conf"), 2, 9)
    assert e.value.message.startswith("include cycle: 'a.conf' is already being included")


# -- positions ---------------------------------------------------------------------------------


def test_every_value_keeps_file_line_and_column():
    text = 'a = 1\nm {\n  "k" : "multi\nline"\n  arr = [ x,\n    y ]\n}\nz = $a\n'
    tree = parse_tree(text, "f.conf", env={})
    a, m, z = (tree.data[k] for k in ("a", "m", "z"))
    assert (a.key_position, a.value.position) == (Position("f.conf", 1, 1), Position("f.conf", 1, 5))
    assert m.value.position == Position("f.conf", 2, 3)
    k, arr = m.value.data["k"], m.value.data["arr"]
    assert (k.key_position, k.value.position) == (Position("f.conf", 3, 3), Position("f.conf", 3, 9))
    assert arr.key_position == Position("f.conf", 5, 3)
    assert [item.position for item in arr.value.data] == [Position("f.conf", 5, 11), Position("f.conf", 6, 5)]
    assert z.value.position == Position("f.conf", 8, 5)  # a variable's value is placed where it is used


def test_tokens_carry_kinds_and_lexemes():
    tokens = list(tokenize("a = [1k, on, $v, 'q', 2.5, 2020-01-01T00:00:00Z]\ninclude x", "t"))
    assert [(t.kind, t.text) for t in tokens] == [
        (TokenKind.KEY, "a"),
        (TokenKind.ARRAY_START, ""),
        (TokenKind.INTEGER, "1k"),
        (TokenKind.BOOL, "on"),
        (TokenKind.VARIABLE, "v"),
        (TokenKind.STRING, "q"),
        (TokenKind.FLOAT, "2.5"),
        (TokenKind.DATETIME, "2020-01-01T00:00:00Z"),
        (TokenKind.ARRAY_END, ""),
        (TokenKind.INCLUDE, "x"),
        (TokenKind.EOF, ""),
    ]


def test_include_must_end_like_a_value(tmp_path):
    (tmp_path / "x.conf").write_text("x = 1")
    with pytest.raises(ConfigError) as e:
        parse_text("include x.conf y", str(tmp_path / "main.conf"), env={})
    assert (e.value.line, e.value.column) == (1, 16)
    assert e.value.message == "expected a new line, ';' or ',' after include 'x.conf', found 'y'"
