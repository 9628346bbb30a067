"""The one STREAM.CREATE / STREAM.UPDATE validator (jetraft.jetstream.validate), as the single
server (JetStreamAccount) and a cluster's meta leader (net/js_cluster.py) use it.

Without a server: the validator alone, and a JetStreamAccount in memory whose answers are
compared with the validator's as the meta leader calls it (net/js_cluster.py).
"""

from __future__ import annotations

import json

import pytest

from jetraft.events import EVENTS
from jetraft.jetstream import errors as E
from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.store import GroupCommit
from jetraft.jetstream.validate import (
    check_stream_create,
    check_stream_update,
    check_subjects_overlap,
)
from jetraft.protocol.subjects import SubjectIndex

T0 = 1_800_000_000_000_000_000
REPLY = "_INBOX.r"
ORDERS = {"name": "ORDERS", "subjects": ["orders.>"], "storage": "memory"}


def body(**config) -> bytes:
    return json.dumps(config).encode()


def codes(call) -> tuple[int, int, str]:
    with pytest.raises(JSApiError) as info:
        call()
    return info.value.code, info.value.err_code, info.value.description


def nothing(_name: str):
    return None


def checked(config: dict) -> StreamConfig:
    return StreamConfig.from_json(config).checked()


# --- the validator alone -------------------------------------------------------------------

@pytest.mark.parametrize("clustered", [False, True])
def test_create_refuses_subjects_overlapping_another_stream(clustered):
    others = ["orders.>", "audit"]
    for subjects in (["orders.eu"], ["audit"], ["x", "orders.*"]):
        assert codes(lambda: check_stream_create(body(name="NEW", subjects=subjects, storage="memory"), "NEW",
                                                 others, existing=nothing, clustered=clustered)) == \
            (400, 10065, "subjects overlap with an existing stream")
    cfg, exists = check_stream_create(body(name="NEW", subjects=["invoices.>"], storage="memory"), "NEW",
                                      others, existing=nothing, clustered=clustered)
    assert (cfg.name, cfg.subjects, exists) == ("NEW", ["invoices.>"], False)


def test_overlap_against_a_subject_index_and_a_list_agree():
    index: SubjectIndex[str] = SubjectIndex()
    for subject in ("orders.>", "audit"):
        index.insert(subject, "S")
    for subjects in (["orders.eu"], ["audit"], ["x.y"]):
        answers = []
        for others in (["orders.>", "audit"], index):
            try:
                check_subjects_overlap(subjects, others)
                answers.append(None)
            except JSApiError as err:
                answers.append(err.err_code)
        assert answers[0] == answers[1], subjects
    assert answers == [None, None]      # x.y overlaps neither


def test_create_of_an_existing_stream_with_its_config_is_answered_with_it():
    cfg, _ = check_stream_create(body(**ORDERS), "ORDERS", [], existing=nothing, clustered=False)

    def existing(name: str):
        return cfg.to_json() if name == "ORDERS" else None

    # its own subjects are among the account's: an identical create is not an overlap
    assert check_stream_create(body(**ORDERS), "ORDERS", ["orders.>"], existing=existing,
                               clustered=False)[1] is True
    assert codes(lambda: check_stream_create(body(**{**ORDERS, "max_msgs": 5}), "ORDERS", ["orders.>"],
                                             existing=existing, clustered=False)) == \
        (400, 10058, "stream name already in use with a different configuration")


@pytest.mark.parametrize("clustered", [False, True])
def test_create_name_mismatch(clustered):
    assert codes(lambda: check_stream_create(body(**ORDERS), "OTHER", [], existing=nothing,
                                             clustered=clustered)) == \
        (400, 10056, "stream name in subject does not match request")


def test_update_name_mismatch_on_a_single_server():
    current = {"ORDERS": checked(ORDERS)}
    assert codes(lambda: check_stream_update(body(**ORDERS), "OTHER", current.__getitem__, [],
                                             clustered=False)) == \
        (400, 10056, "stream name in subject does not match request")


def test_replicas_change_refused_by_the_meta_leader():
    def current(name: str) -> StreamConfig:
        return checked({**ORDERS, "num_replicas": 3})

    assert codes(lambda: check_stream_update(body(**{**ORDERS, "num_replicas": 1}), "ORDERS", current, [],
                                             clustered=True, meta_leader=True)) == \
        (400, 10061, "Replicas configuration can not be updated")
    new = check_stream_update(body(**{**ORDERS, "num_replicas": 3, "max_msgs": 9}), "ORDERS", current, [],
                              clustered=True, meta_leader=True)
    assert (new.num_replicas, new.max_msgs) == (3, 9)


def test_replicas_above_one_refused_on_a_single_server():
    current = {"ORDERS": checked(ORDERS)}
    assert codes(lambda: check_stream_update(body(**{**ORDERS, "num_replicas": 3}), "ORDERS",
                                             current.__getitem__, [], clustered=False)) == \
        (500, 10074, "replicas > 1 not supported in non-clustered mode")
    assert codes(lambda: check_stream_create(body(**{**ORDERS, "num_replicas": 3}), "ORDERS", [],
                                             existing=nothing, clustered=False)) == \
        (500, 10074, "replicas > 1 not supported in non-clustered mode")


@pytest.mark.parametrize("meta_leader", [False, True])
def test_update_refuses_overlap_with_the_other_streams(meta_leader):
    current = {"ORDERS": checked(ORDERS)}
    update = body(**{**ORDERS, "subjects": ["orders.>", "audit.>"]})
    assert codes(lambda: check_stream_update(update, "ORDERS", current.__getitem__, ["audit.x"],
                                             clustered=meta_leader, meta_leader=meta_leader)) == \
        (400, 10065, "subjects overlap with an existing stream")
    assert check_stream_update(update, "ORDERS", current.__getitem__, ["billing.>"],
                               clustered=meta_leader, meta_leader=meta_leader).subjects == ["orders.>", "audit.>"]


# --- the same bad request through both callers ------------------------------------------

class Events:
    def emit(self, name: str, **fields) -> None:
        assert name in EVENTS, name


AUDIT = {"name": "AUDIT", "subjects": ["audit.>"], "storage": "memory"}


def single_server() -> JetStreamAccount:
    acc = JetStreamAccount("$G", store_dir=None, sync=GroupCommit(), events=Events(),
                           interest=lambda s: True, server_version="2.15.1")
    for config in (ORDERS, AUDIT):
        reply = acc.handle_api(f"$JS.API.STREAM.CREATE.{config['name']}", REPLY, None, body(**config), T0)
        assert "error" not in json.loads(reply[0].out.data)
    return acc


def meta_leader_error(op: str, name: str, payload: bytes) -> dict:
    """What a cluster's meta leader answers: the validator called as net/js_cluster.py calls
    it, over assignments holding the single server's two streams."""
    assigned = {c["name"]: single_server().streams[c["name"]].stream.config.to_json() for c in (ORDERS, AUDIT)}

    def subjects(skip: str | None = None) -> list[str]:
        return [s for n, c in assigned.items() if n != skip for s in (c.get("subjects") or [n])]

    def current(stream: str) -> StreamConfig:
        if stream not in assigned:
            raise E.stream_not_found()
        return StreamConfig.from_json(assigned[stream]).checked()

    with pytest.raises(JSApiError) as info:
        if op == "CREATE":
            check_stream_create(payload, name, subjects(), existing=assigned.get, clustered=True)
        else:
            check_stream_update(payload, name, current, subjects(name), clustered=True, meta_leader=True)
    return info.value.to_json()


BAD_CREATES = [
    ("ORDERS2", b'{"name": "ORDERS2", "subjects": ["orders.eu"], "storage": "memory"}'),   # overlap
    ("X", body(**ORDERS)),                                                                 # name mismatch
    ("ORDERS", body(**{**ORDERS, "max_msgs": 5})),                                         # name in use
    ("BAD", b'{"name": "BAD", '),                                                          # bad JSON
    ("BAD", body(name="BAD", subjects=["a..b"])),                                          # bad subject
    ("RP", body(name="RP", subjects=["rp.>"], republish={"src": "rp.>", "dest": "out.>"})),  # unsupported
]
BAD_UPDATES = [
    ("ORDERS", body(**{**ORDERS, "subjects": ["orders.>", "audit.x"]})),                   # overlap
    ("NOPE", body(name="NOPE", subjects=["nope"], storage="memory")),                      # not found
    ("ORDERS", b"{"),                                                                      # bad JSON
    ("ORDERS", body(**{**ORDERS, "allow_atomic": True})),                                  # unsupported
]


@pytest.mark.parametrize(("op", "name", "payload"),
                         [("CREATE", *c) for c in BAD_CREATES] + [("UPDATE", *u) for u in BAD_UPDATES])
def test_single_server_and_meta_leader_answer_a_bad_request_alike(op, name, payload):
    acc = single_server()
    before = {n: e.stream.config.to_json() for n, e in acc.streams.items()}
    single = json.loads(acc.handle_api(f"$JS.API.STREAM.{op}.{name}", REPLY, None, payload, T0)[0].out.data)
    assert single["error"] == meta_leader_error(op, name, payload)
    assert {n: e.stream.config.to_json() for n, e in acc.streams.items()} == before
    assert acc.stream_for("audit.x").name == "AUDIT"        # a refused update keeps the subjects
    assert acc.stream_for("orders.x").name == "ORDERS"
