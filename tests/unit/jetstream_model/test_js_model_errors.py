"""jetraft.jetstream.errors: the error table, templates, wire shape, type strings."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from nats.js.errors import APIError

from jetraft.jetstream import errors as E
from jetraft.gofmt import duration as go_duration
from jetraft.jetstream.errors import ERRORS, JSApiError, api_error


def test_js_model_table_is_complete_and_unique():
    assert len(ERRORS) == 226
    assert len({e[2] for e in ERRORS}) == len(ERRORS)
    assert len({e[0] for e in ERRORS}) == len(ERRORS)


@pytest.mark.parametrize(
    ("err", "triple"),
    [
        (E.stream_not_found(), (404, 10059, "stream not found")),
        (E.consumer_not_found(), (404, 10014, "consumer not found")),
        (E.stream_name_exist(), (400, 10058, "stream name already in use with a different configuration")),
        (E.subjects_overlap(), (400, 10065, "subjects overlap with an existing stream")),
        (E.no_message_found(), (404, 10037, "no message found")),
        (E.wrong_last_sequence(7), (400, 10071, "wrong last sequence: 7")),
        (E.wrong_last_msg_id("x1"), (400, 10070, "wrong last msg ID: x1")),
        (E.stream_name_mismatch(), (400, 10056, "stream name in subject does not match request")),
        (E.invalid_json("boom"), (400, 10025, "invalid JSON: boom")),
        (E.cluster_no_peers("no suitable peers for placement"), (400, 10005, "no suitable peers for placement")),
        (E.cluster_not_available(), (503, 10008, "JetStream system temporarily unavailable")),
        (E.not_enabled_for_account(), (503, 10039, "JetStream not enabled for account")),
        (E.insufficient_resources(), (503, 10023, "insufficient resources")),
        (E.sequence_not_found(3), (400, 10043, "sequence 3 not found")),
        (E.consumer_name_too_long(255), (400, 10102, "consumer name is too long, maximum allowed is 255")),
    ],
)
def test_js_model_named_errors(err, triple):
    assert (err.code, err.err_code, err.description) == triple


def test_js_model_error_json_has_exactly_three_keys_and_nats_py_reads_it():
    for constant, *_ in ERRORS:
        body = api_error(constant).to_json()
        assert set(body) == {"code", "err_code", "description"}
        APIError(**body)  # nats-py crashes on any extra key
    assert str(E.stream_not_found()) == "stream not found (10059)"
    assert JSApiError.from_json({"code": 404, "err_code": 10059, "description": "stream not found"}) == E.stream_not_found()


def test_js_model_every_named_helper_builds():
    for name, fn in inspect.getmembers(E, inspect.isfunction):
        if fn.__module__ != E.__name__ or name.startswith("_") or name in ("api_error", "by_err_code", "error_response"):
            continue
        args = [1] * len(inspect.signature(fn).parameters)
        assert isinstance(fn(*args), JSApiError), name


def test_js_model_go_duration():
    assert [go_duration(n) for n in (0, 1, 1500, 1_500_000, 30 * 10**9, 90 * 10**9, 7200 * 10**9)] == [
        "0s", "1ns", "1.5µs", "1.5ms", "30s", "1m30s", "2h0m0s"]
    assert api_error("JSConsumerInactiveThresholdExcess", limit=go_duration(10**10)).description == (
        "consumer inactive threshold exceeds system limit of 10s")


def test_js_model_response_types():
    assert E.STREAM_CREATE_RESPONSE == "io.nats.jetstream.api.v1.stream_create_response"
    assert E.error_response(E.CONSUMER_INFO_RESPONSE, E.consumer_not_found()) == {
        "type": "io.nats.jetstream.api.v1.consumer_info_response",
        "error": {"code": 404, "err_code": 10014, "description": "consumer not found"},
    }


def _error_calls(tree: ast.AST):
    """(line, constant, keyword names) of each ``api_error("<constant>", ...)`` call."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name != "api_error" or not node.args:
            continue
        first = node.args[0]
        constant = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        keywords = None if any(k.arg is None for k in node.keywords) else {k.arg for k in node.keywords}
        yield node.lineno, constant, keywords


def _misnamed_errors(sources: dict[str, str]) -> list[str]:
    """What is wrong with the api_error calls of ``sources`` (path -> text): an unknown
    constant, a placeholder left unfilled, an argument no placeholder takes."""
    placeholders = {name: set(re.findall(r"\{(\w+)\}", template)) for name, _c, _e, template in ERRORS}
    problems = []
    for path, text in sources.items():
        for line, constant, keywords in _error_calls(ast.parse(text)):
            where = f"{path}:{line}"
            if constant is None:
                continue        # built from a variable: by_err_code and the table's own helpers
            if constant not in placeholders:
                problems.append(f"{where}: no error {constant!r} in nats-server's errors.json")
            elif keywords is not None and keywords != placeholders[constant]:
                problems.append(f"{where}: {constant} takes {sorted(placeholders[constant])}, "
                                f"given {sorted(keywords)}")
    return problems


def test_every_api_error_call_names_a_known_error_and_fills_its_placeholders():
    package = Path(E.__file__).resolve().parents[1]
    sources = {str(p.relative_to(package)): p.read_text() for p in sorted(package.rglob("*.py"))}
    assert sum(1 for text in sources.values() for _ in _error_calls(ast.parse(text))) > 100
    assert _misnamed_errors(sources) == []


def test_a_misnamed_error_or_a_wrong_placeholder_is_found():
    planted = {"planted.py": 'E.api_error("JSStreamNotFoundEr")\n'
                             'E.api_error("JSSequenceNotFoundErrF", sequence=3)\n'
                             'api_error("JSInvalidJSONErr")\n'}
    assert _misnamed_errors(planted) == [
        "planted.py:1: no error 'JSStreamNotFoundEr' in nats-server's errors.json",
        "planted.py:2: JSSequenceNotFoundErrF takes ['seq'], given ['sequence']",
        "planted.py:3: JSInvalidJSONErr takes ['err'], given []"]
