"""jetraft.protocol.transform: each mapping function on the examples of nats-server's
documentation ("Subject Mapping and Partitioning") and its tests (server/subject_transform_test.go),
the errors in nats-server's words, and properties: a transform without functions only moves
tokens, a partition is always in range and the same for the same tokens. The side-by-side
check against nats-server's own stored subjects is tests/compat/test_compat_js_transforms.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetraft.protocol.transform import MappingError, NoMatch, SubjectTransform, validate_mapping


def tr(src: str, dest: str, subject: str) -> str:
    t = SubjectTransform.parse(src, dest)
    assert t is not None
    return t.match(subject)


@pytest.mark.parametrize(("src", "dest", "subject", "expected"), [
    ("foo.*.*", "bar.$2.$1", "foo.A.B", "bar.B.A"),
    ("foo.*.*", "bar.{{wildcard(2)}}.{{wildcard(1)}}", "foo.A.B", "bar.B.A"),
    ("foo.*.*", "bar.{{ Wildcard( 2 ) }}.x", "foo.A.B", "bar.B.x"),
    ("foo.>", "bar.>", "foo.a.b.c", "bar.a.b.c"),
    ("foo.*.>", "bar.$1.>", "foo.a.b.c", "bar.a.b.c"),
    ("*", "{{splitFromLeft(1,3)}}", "12345", "123.45"),
    ("*", "{{SplitFromRight(1,3)}}", "12345", "12.345"),
    ("*", "{{splitFromLeft(1,9)}}", "12345", "12345"),
    ("*", "{{sliceFromLeft(1,2)}}", "12345", "12.34.5"),
    ("*", "{{sliceFromRight(1,2)}}", "12345", "1.23.45"),
    ("*", "{{sliceFromLeft(1,5)}}", "12345", "12345"),
    ("*", "{{split(1,-)}}", "-abc-def--ghij-", "abc.def.ghij"),
    ("*", "{{split(1,-)}}", "--a", ".a"),           # nats-server writes it so
    ("*", "{{left(1,2)}}.{{right(1,2)}}", "12345", "12.45"),
    ("*", "{{left(1,0)}}", "abc", "abc"),
    ("foo", "bar", "foo", "bar"),
    ("", "bar.>", "x.y", "bar.x.y"),
])
def test_each_function_gives_what_nats_server_gives(src, dest, subject, expected):
    assert tr(src, dest, subject) == expected


def test_partition_is_the_fnv1a_hash_of_the_tokens_it_names():
    # FNV-1a 32-bit of b"foo" is 0xa9f37ed7 = 2851307223; of b"ab" 0x4d2505ca = 1294271946
    assert tr("foo", "{{partition(1000)}}", "foo") == str(2851307223 % 1000)
    assert tr("*.*", "{{partition(1000,1,2)}}", "a.b") == str(1294271946 % 1000)
    assert tr("*.*", "{{partition(0,1)}}", "a.b") == "0"


def test_random_draws_from_the_generator_it_is_given():
    t = SubjectTransform.parse("*", "p.{{random(10)}}.$1")
    assert t.match("x", lambda n: n - 1) == "p.9.x"
    assert t.match("x").startswith("p.") and 0 <= int(t.match("x").split(".")[1]) < 10


def test_no_destination_is_no_transform_and_a_subject_outside_the_source_is_no_match():
    assert SubjectTransform.parse("foo.*", "") is None
    t = SubjectTransform.parse("foo.*", "bar.$1")
    with pytest.raises(NoMatch):
        t.match("baz.x")
    with pytest.raises(MappingError, match="^invalid subject$"):
        t.match("foo.*")


@pytest.mark.parametrize(("src", "dest", "message"), [
    ("foo.*", "bar.*", "invalid subject"),
    ("foo.>", "bar", "invalid subject"),
    ("foo", "bar.>", "invalid subject"),
    ("foo..x", "bar", "invalid subject"),
    ("foo.*", "{{wildcard(2)}}", "invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]"),
    ("foo", "{{wildcard(1)}}", "invalid mapping destination: wildcard index out of range in {{wildcard(1)}}"),
    ("foo.*", "{{wildcard()}}", "invalid mapping destination: not enough arguments passed to the function in "
                                "{{wildcard()}}"),
    ("foo.*", "{{wildcard(1,2)}}", "invalid mapping destination: too many arguments passed to the function in "
                                   "{{wildcard(1,2)}}"),
    ("foo.*", "{{wildcard(x)}}", "invalid mapping destination: function argument is invalid or in the wrong "
                                 "format in {{wildcard(x)}}"),
    ("foo.*", "{{splitFromLeft(1)}}", "invalid mapping destination: not enough arguments passed to the function "
                                      "in {{splitFromLeft(1)}}"),
    ("foo.*", "{{left(1,99999999999)}}", "invalid mapping destination: function argument is invalid or in the "
                                         "wrong format in {{left(1,99999999999)}}"),
    ("foo.*", "{{nope(1)}}", "invalid mapping destination: unknown function in {{nope(1)}}"),
])
def test_an_invalid_transform_is_refused_in_nats_server_s_words(src, dest, message):
    with pytest.raises(MappingError) as info:
        SubjectTransform.parse(src, dest)
    assert str(info.value) == message


def test_strict_takes_wildcards_only_and_every_one_of_them():
    with pytest.raises(MappingError, match="only mapping function allowed for import transforms"):
        SubjectTransform.parse("foo.*", "{{partition(2,1)}}", strict=True)
    with pytest.raises(MappingError, match=r"not using all of the token wildcard\(s\) in bar\.\$1"):
        SubjectTransform.parse("foo.*.*", "bar.$1", strict=True)
    assert SubjectTransform.parse("foo.*.*", "bar.$2.$1", strict=True).match("foo.a.b") == "bar.b.a"


@pytest.mark.parametrize(("dest", "message"), [
    ("a..b", "invalid mapping destination: invalid transform"),
    ("a.>.b", "invalid mapping destination: invalid transform in b"),
    ("a.b c", "invalid mapping destination: invalid transform"),
    ("a.{{shout(1)}}", "invalid mapping destination: unknown function in {{shout(1)}}"),
])
def test_validate_mapping_refuses_what_nats_server_s_validate_mapping_refuses(dest, message):
    with pytest.raises(MappingError) as info:
        validate_mapping("x.*", dest)
    assert str(info.value) == message


tokens = st.text(alphabet="abcdefxyz0123456789-_", min_size=1, max_size=8)


@given(st.lists(tokens, min_size=1, max_size=4), st.randoms())
def test_a_transform_without_functions_only_moves_tokens(parts, rnd):
    order = list(range(1, len(parts) + 1))
    rnd.shuffle(order)
    src = ".".join(["in"] + ["*"] * len(parts))
    dest = ".".join(["out"] + [f"{{{{wildcard({i})}}}}" for i in order])
    assert tr(src, dest, ".".join(["in", *parts])) == ".".join(["out"] + [parts[i - 1] for i in order])


@given(st.lists(tokens, min_size=2, max_size=2), st.integers(min_value=1, max_value=5000))
def test_a_partition_is_in_range_and_the_same_for_the_same_tokens(parts, n):
    t = SubjectTransform.parse("*.*", f"{{{{partition({n},1,2)}}}}.$1")
    first = t.match(".".join(parts))
    assert first == t.match(".".join(parts))
    assert 0 <= int(first.split(".")[0]) < n
