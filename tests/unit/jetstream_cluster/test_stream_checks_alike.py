"""A bad STREAM.CREATE or STREAM.UPDATE gets the same error from a single server
(JetStreamAccount) and from a cluster's meta leader (the cluster controller, scripted by
controller_world.World): both call jetraft.jetstream.validate, with the parameters each
path documents. Nothing is proposed or changed for a refused request.
"""

from __future__ import annotations

import json

import pytest
from controller_world import World

from jetraft.events import EVENTS
from jetraft.jetstream import errors as E
from jetraft.jetstream.api import JetStreamAccount
from jetraft.storage import GroupCommit

T0 = 1_800_000_000_000_000_000
R = "_INBOX.r"
ORDERS = {"name": "ORDERS", "subjects": ["orders.>"], "storage": "memory"}
AUDIT = {"name": "AUDIT", "subjects": ["audit.>"], "storage": "memory"}


def body(**config) -> bytes:
    return json.dumps(config).encode()


class Events:
    def emit(self, name: str, **fields) -> None:
        assert name in EVENTS, name


def single_server() -> JetStreamAccount:
    acc = JetStreamAccount("$G", store_dir=None, sync=GroupCommit(), events=Events(),
                           interest=lambda s: True, server_version="2.15.1")
    for config in (ORDERS, AUDIT):
        reply = acc.handle_api(f"$JS.API.STREAM.CREATE.{config['name']}", R, None, body(**config), T0)
        assert "error" not in json.loads(reply[0].out.data)
    return acc


def meta_leader() -> World:
    """The meta leader n1 of three servers, with ORDERS and AUDIT assigned to it alone
    (one replica each, as on the single server)."""
    w = World({"n1": (), "n2": (), "n3": ()})
    w.meta_leader("n1")
    for config in (ORDERS, AUDIT):
        w.assign(config["name"], subjects=tuple(config["subjects"]), peers=("n1",), leader="n1")
    w.take_replies()
    return w


BAD = [
    pytest.param("CREATE", "ORDERS2", body(name="ORDERS2", subjects=["orders.eu"], storage="memory"),
                 10065, id="create-overlap"),
    pytest.param("CREATE", "X", body(**ORDERS), 10056, id="create-name-mismatch"),
    pytest.param("CREATE", "ORDERS", body(**{**ORDERS, "max_msgs": 5}), 10058, id="create-name-in-use"),
    pytest.param("CREATE", "BAD", b'{"name": "BAD", ', 10025, id="create-bad-json"),
    pytest.param("CREATE", "BAD", body(name="BAD", subjects=["a..b"]), 10052, id="create-bad-subject"),
    pytest.param("CREATE", "RP", body(name="RP", subjects=["rp.>"], allow_batched=True),
                 10052, id="create-unsupported"),
    pytest.param("UPDATE", "ORDERS", body(**{**ORDERS, "subjects": ["orders.>", "audit.x"]}), 10065,
                 id="update-overlap"),
    pytest.param("UPDATE", "NOPE", body(name="NOPE", subjects=["nope"], storage="memory"), 10059,
                 id="update-not-found"),
    pytest.param("UPDATE", "ORDERS", body(**{**AUDIT, "subjects": ["audit2.>"]}), 10056,
                 id="update-name-mismatch"),
    pytest.param("UPDATE", "ORDERS", b"{", 10025, id="update-bad-json"),
    pytest.param("UPDATE", "ORDERS", body(**{**ORDERS, "allow_batched": True}), 10052, id="update-unsupported"),
]


@pytest.mark.parametrize(("op", "name", "payload", "err_code"), BAD)
def test_single_server_and_meta_leader_refuse_a_bad_request_alike(op, name, payload, err_code):
    subject = f"$JS.API.STREAM.{op}.{name}"
    acc = single_server()
    before = {n: e.stream.config.to_json() for n, e in acc.streams.items()}
    single = json.loads(acc.handle_api(subject, R, None, payload, T0)[0].out.data)
    assert single["error"]["err_code"] == err_code
    assert {n: e.stream.config.to_json() for n, e in acc.streams.items()} == before
    assert acc.stream_for("audit.x").name == "AUDIT"       # a refused update keeps every subject
    assert acc.stream_for("orders.x").name == "ORDERS"

    w = meta_leader()
    assigned = {key: sa.config for key, sa in w.c.meta.streams.items()}
    assert w.request(subject, payload) is True
    ((inbox, cluster),) = w.take_replies()
    assert inbox == R
    assert cluster == single
    assert w.meta.proposals == []
    assert {key: sa.config for key, sa in w.c.meta.streams.items()} == assigned


def test_the_meta_leader_refuses_a_replica_count_change_the_single_server_takes_as_unsupported():
    """The one documented difference a client can see: a meta leader compares the replica
    count with the assignment's (10061), a single server refuses replicas > 1 (10074)."""
    update = body(**{**ORDERS, "num_replicas": 3})
    single = json.loads(single_server().handle_api("$JS.API.STREAM.UPDATE.ORDERS", R, None, update, T0)[0].out.data)
    assert single["error"]["err_code"] == 10074
    w = meta_leader()
    w.request("$JS.API.STREAM.UPDATE.ORDERS", update)
    ((_inbox, cluster),) = w.take_replies()
    assert cluster == {"type": E.STREAM_UPDATE_RESPONSE, "error": {
        "code": 400, "err_code": 10061, "description": "Replicas configuration can not be updated"}}
    assert w.meta.proposals == []
