"""``$JS.API.STREAM.INFO`` answers bounded replies: ``deleted_details`` lists at most
100,000 deleted sequences (the lowest; ``num_deleted`` stays the true count) and
``subjects_filter`` answers pages of 100,000 subjects from ``offset``, as nats-server
server/jetstream_api.go ``jsStreamInfoRequest`` pages them (``JSMaxSubjectDetails``).

The account is driven in-process (no sockets); the side-by-side comparison with
nats-server of the same paging on a few subjects is tests/compat/test_compat_stream_info_pages.py.
"""

from __future__ import annotations

import json

import pytest

from jetraft.jetstream.api import JetStreamAccount

T0 = 1_800_000_000_000_000_000
REPLY = "_INBOX.r"
LIMIT = 100_000          # nats-server JSMaxSubjectDetails
GAP = 10**12

pytestmark = pytest.mark.timeout(60)


class Events:
    def emit(self, name: str, **fields) -> None:
        pass


@pytest.fixture
def account():
    acc = JetStreamAccount("$G", store_dir=None, sync=None, events=Events(), interest=lambda s: True,
                           server_version="2.15.1")
    body = json.dumps({"name": "S", "subjects": ["s.>"], "storage": "memory"})
    (created,) = acc.handle_api("$JS.API.STREAM.CREATE.S", REPLY, None, body.encode(), T0)
    assert "error" not in json.loads(created.out.data)
    return acc


def info(acc: JetStreamAccount, body: dict | None = None) -> tuple[dict, int]:
    """The STREAM.INFO reply of S and its size in bytes."""
    payload = b"" if body is None else json.dumps(body).encode()
    (reply,) = acc.handle_api("$JS.API.STREAM.INFO.S", REPLY, None, payload, T0)
    return json.loads(reply.out.data), len(reply.out.data)


def paging(reply: dict) -> tuple[int, int, int]:
    return reply["total"], reply["offset"], reply["limit"]


def test_deleted_details_over_a_gap_of_10_12_is_a_bounded_reply(account):
    # as a restore leaves it: a message at 1 and one at 10**12 + 1
    account.publish(account.streams["S"], "s.a", None, None, b"1", T0)
    account.streams["S"].stream.store.store_at(GAP + 1, "s.b", None, b"2", T0 + 1)
    reply, size = info(account, {"deleted_details": True})
    assert "error" not in reply, reply
    st = reply["state"]
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (2, 1, GAP + 1)
    assert st["num_deleted"] == GAP - 1
    assert st["deleted"] == list(range(2, 2 + LIMIT))
    assert size < 2 << 20, size
    # without details: no list at all
    reply, size = info(account)
    assert reply["state"]["num_deleted"] == GAP - 1 and "deleted" not in reply["state"]
    assert size < 4096


def test_subjects_come_in_sorted_pages_of_100000(account):
    store = account.streams["S"].stream.store
    n = LIMIT + 3
    names = [f"s.{i:06d}" for i in range(n)]
    for name in reversed(names):
        store.store(name, None, b"", T0)
    reply, size = info(account, {"subjects_filter": ">"})
    assert paging(reply) == (n, 0, LIMIT)
    assert list(reply["state"]["subjects"]) == names[:LIMIT]
    assert set(reply["state"]["subjects"].values()) == {1}
    assert reply["state"]["num_subjects"] == n
    assert size < 4 << 20, size
    reply, _ = info(account, {"subjects_filter": "s.*", "offset": LIMIT})
    assert paging(reply) == (n, LIMIT, LIMIT)
    assert reply["state"]["subjects"] == {name: 1 for name in names[LIMIT:]}
    reply, _ = info(account, {"subjects_filter": "s.*", "offset": LIMIT + 1})
    assert reply["state"]["subjects"] == {name: 1 for name in names[LIMIT + 1:]}


def test_subject_offsets_as_nats_server_answers_them(account):
    for i, name in enumerate(["s.c", "s.a", "s.b", "s.a", "s.d"]):
        account.publish(account.streams["S"], name, None, None, b"x", T0 + i)
    counts = {"s.a": 2, "s.b": 1, "s.c": 1, "s.d": 1}
    reply, _ = info(account, {"subjects_filter": ">"})
    assert paging(reply) == (4, 0, LIMIT) and reply["state"]["subjects"] == counts
    reply, _ = info(account, {"subjects_filter": ">", "offset": 2})
    assert paging(reply) == (4, 2, LIMIT) and reply["state"]["subjects"] == {"s.c": 1, "s.d": 1}
    # past the end: the offset as asked, no subjects
    reply, _ = info(account, {"subjects_filter": ">", "offset": 9})
    assert paging(reply) == (4, 9, LIMIT) and "subjects" not in reply["state"]
    # a negative offset counts as 0
    reply, _ = info(account, {"subjects_filter": "s.*", "offset": -3})
    assert paging(reply) == (4, 0, LIMIT) and reply["state"]["subjects"] == counts
    # nothing matches: every paging field 0
    reply, _ = info(account, {"subjects_filter": "t.>", "offset": 1})
    assert paging(reply) == (0, 0, 0) and "subjects" not in reply["state"]
    # no filter: the offset is not looked at
    reply, _ = info(account, {"offset": 1})
    assert paging(reply) == (0, 0, 0) and "subjects" not in reply["state"]
    reply, _ = info(account, {"offset": "1"})
    assert reply["error"]["err_code"] == 10025
