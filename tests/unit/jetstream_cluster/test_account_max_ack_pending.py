"""The account's ``max_ack_pending`` (``accounts { A { jetstream { max_ack_pending: N } } }``)
in a cluster: the stream's leader refuses a consumer above it before proposing (10121), and
writes the default it gives into the request it proposes, so that every replica stores the
same config whatever its own configuration says (nats-server: the meta leader's
setConsumerConfigDefaults, carried by the consumer assignment; jetstream_cluster.go
jsClusteredConsumerRequest). Side by side with nats-server: tests/compat/test_compat_account_limits.py.
"""

from __future__ import annotations

import json

from controller_world import World

from jetraft.jetstream import errors as E
from jetraft.jetstream.model import AccountLimits
from jetraft.jetstream.replicated import decode_entry

KEY = ("$G", "S")
R = "_INBOX.r"
EXCESS = {"code": 400, "err_code": 10121, "description": "consumer max ack pending exceeds system limit of 100"}


def world(limit: int = 100) -> World:
    w = World({"n1": (), "n2": (), "n3": ()})
    w.meta_leader("n1")
    w.assign("S", leader="n1")
    w.take_replies()
    w.accounts["$G"].limits = AccountLimits(max_ack_pending=limit)
    return w


def create(w: World, name: str, **config) -> None:
    w.request(f"$JS.API.CONSUMER.DURABLE.CREATE.S.{name}",
              {"stream_name": "S", "config": {"durable_name": name, **config}})


def proposed_config(w: World) -> dict:
    """The consumer config of the one request proposed to S's group so far."""
    (entry,) = (decode_entry(d) for d in w.groups[KEY].proposals)
    return json.loads(entry[-1])["config"]


def stored(w: World, name: str) -> int:
    return w.accounts["$G"].streams["S"].consumers[name].config.max_ack_pending


def test_the_leader_writes_the_accounts_default_into_the_proposal_and_every_replica_stores_it():
    w = world()
    create(w, "c", ack_policy="explicit", description="d")
    assert proposed_config(w) == {"durable_name": "c", "ack_policy": "explicit", "description": "d",
                                  "max_ack_pending": 100}
    # a replica whose configuration has no such limit applies the proposal: the same config
    w.accounts["$G"].limits = AccountLimits()
    w.apply(KEY)
    (reply,) = [body for subject, body in w.take_replies() if subject == R]
    assert reply["config"]["max_ack_pending"] == 100
    assert stored(w, "c") == 100


def test_a_request_the_limit_does_not_change_is_proposed_as_sent():
    for config in ({"ack_policy": "explicit", "max_ack_pending": 10},       # its own value
                   {"ack_policy": "explicit", "max_ack_pending": -1},       # no limit, asked for
                   {"ack_policy": "none"}):                                 # no acks: no default
        w = world()
        body = {"stream_name": "S", "config": {"durable_name": "c", **config}}
        w.request("$JS.API.CONSUMER.DURABLE.CREATE.S.c", body)
        (entry,) = (decode_entry(d) for d in w.groups[KEY].proposals)
        assert entry[-1] == json.dumps(body).encode()
    w = world(limit=2000)       # above nats-server's default of 1000: the default stays
    create(w, "c", ack_policy="explicit")
    assert "max_ack_pending" not in proposed_config(w)


def test_a_consumer_above_the_limit_is_refused_by_the_leader_unproposed():
    w = world()
    create(w, "c", ack_policy="explicit", max_ack_pending=101)
    assert w.take_replies() == [(R, {"type": E.CONSUMER_CREATE_RESPONSE, "error": EXCESS})]
    assert w.groups[KEY].proposals == []


def test_replicas_applying_the_log_do_not_check_the_accounts_limit_again():
    """The limit is this server's configuration: a replica whose own is lower than the
    leader's stores what the leader accepted, as it does with max_consumers."""
    w = world()
    create(w, "c", ack_policy="explicit", max_ack_pending=100)
    w.accounts["$G"].limits = AccountLimits(max_ack_pending=10)
    w.apply(KEY)
    assert stored(w, "c") == 100
