"""The one STREAM.CREATE / STREAM.UPDATE validator (jetraft.jetstream.validate), as the single
server (JetStreamAccount) and a cluster's meta leader (the jetstream/cluster package) call it.

The validator alone, with the parameters of each caller; the same bad requests through a
single server and through the cluster controller are compared in
tests/unit/jetstream_cluster/test_stream_checks_alike.py.
"""

from __future__ import annotations

import json

import pytest

from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.validate import (
    check_stream_create,
    check_stream_update,
    check_subjects_overlap,
)
from jetraft.protocol.subjects import SubjectIndex

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
