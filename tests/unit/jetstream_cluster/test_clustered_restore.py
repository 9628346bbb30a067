"""A clustered $JS.API.STREAM.RESTORE as the cluster controller decides it, and the meta
entries that carry it (jetraft.jetstream.cluster, jetraft.jetstream.meta).

Scripted in the World of ``controller_world`` (server n1): the meta leader assigns a restored
stream with a restorer; only the restorer opens a replica while the data comes, and is told
to start the restore once it leads; the other peers open theirs, as non-members, once the
restore reaches its ``catchup`` phase; a stream being restored refuses publishes and changes
(10194); a leader of a stream being restored that does not run the restore has it deleted.
"""

from __future__ import annotations

import msgpack
import pytest
from controller_world import T0, World

from jetraft.jetstream import errors as E
from jetraft.jetstream.cluster import StartRestore
from jetraft.jetstream.meta import (
    MetaEntryError,
    MetaState,
    StreamAssignment,
    encode_assign_stream,
    encode_remove_stream,
    encode_restore_state,
    group_name,
)

R = "_INBOX.r"
KEY = ("$G", "S")
CONFIG = {"name": "S", "subjects": ["s.>"], "num_replicas": 3, "storage": "file"}
IN_PROGRESS = {"code": 500, "err_code": 10194,
               "description": "stream is offline: a restore of the stream is in progress"}


class RestoreWorld(World):
    """:class:`World` that records StartRestore actions."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.started: list[StartRestore] = []

    def run(self, actions) -> None:
        rest = []
        for a in actions:
            if isinstance(a, StartRestore):
                self.started.append(a)
            else:
                rest.append(a)
        super().run(rest)


@pytest.fixture
def w(tmp_path) -> RestoreWorld:
    world = RestoreWorld({"n1": (), "n2": (), "n3": ()})
    world.meta_leader("n1")
    for acc in world.accounts.values():
        acc.base = str(tmp_path / acc.name)      # a restored file stream needs a store
    return world


def restoring(w: RestoreWorld, restorer: str, phase: str = "data", reply: str | None = R) -> StreamAssignment:
    """Apply the assignment of S as a restore by ``restorer`` in ``phase``."""
    peers = (restorer, *sorted({"n1", "n2", "n3"} - {restorer}))
    sa = StreamAssignment("$G", "S", dict(CONFIG), group_name("S", "$G", "S", T0, replicas=3),
                          peers, T0, reply=reply, preferred=restorer, restore=phase, restored_by=restorer)
    for change in w.c.meta.apply(encode_assign_stream(sa)):
        w.run(w.c.meta_change(change, T0))
    return sa


def move_to(w: RestoreWorld, phase: str | None) -> None:
    for change in w.c.meta.apply(encode_restore_state("$G", "S", phase)):
        w.run(w.c.meta_change(change, T0))


def answer(w: RestoreWorld) -> dict:
    ((subject, body),) = w.take_replies()
    assert subject == R
    return body


def test_the_meta_leader_assigns_a_restore_with_its_first_peer_as_restorer(w):
    assert w.request("$JS.API.STREAM.RESTORE.S", {"config": CONFIG, "state": {}}) is True
    assert w.replies == []
    w.commit_meta()
    sa = w.c.meta.streams[KEY]
    assert (sa.restore, sa.restored_by, sa.preferred) == ("data", sa.peers[0], sa.peers[0])
    assert sorted(sa.peers) == ["n1", "n2", "n3"] and sa.config["num_replicas"] == 3
    # only the restorer holds a replica while the data comes, in a group of itself
    if sa.restored_by == "n1":
        assert w.groups[KEY].peers == ("n1",)
    else:
        assert KEY not in w.replicas


@pytest.mark.parametrize(("body", "error"), [
    pytest.param({"config": dict(CONFIG, storage="memory"), "state": {}},
                 {"code": 500, "err_code": 10062, "description": "restore failed: a memory stream cannot "
                  "be restored in clustered mode: restore it with file storage"}, id="memory"),
    pytest.param({"config": dict(CONFIG, name="T"), "state": {}},
                 {"code": 400, "err_code": 10056, "description": "stream name in subject does not match "
                  "request"}, id="name mismatch"),
    pytest.param(None, {"code": 400, "err_code": 10003, "description": "bad request"}, id="empty"),
])
def test_a_refused_restore_is_answered_with_nats_servers_fields_and_not_proposed(w, body, error):
    w.request("$JS.API.STREAM.RESTORE.S", body)
    assert answer(w) == {"type": E.STREAM_RESTORE_RESPONSE, "error": error, "deliver_subject": ""}
    assert w.meta.proposals == []


def test_a_restore_of_an_assigned_stream_is_refused(w):
    restoring(w, "n2")
    w.request("$JS.API.STREAM.RESTORE.S", {"config": CONFIG, "state": {}})
    assert answer(w)["error"]["err_code"] == 10130
    assert w.meta.proposals == []


def test_a_restore_on_a_follower_goes_to_the_meta_leader(w):
    w.meta_leader("n2")
    assert w.request("$JS.API.STREAM.RESTORE.S", {"config": CONFIG, "state": {}}) is True
    ((server, req),) = w.forwards
    assert server == "n2" and req.subject == "$JS.API.STREAM.RESTORE.S"


def test_the_restorer_starts_the_restore_once_it_leads(w):
    sa = restoring(w, "n1")
    assert w.groups[KEY].peers == ("n1",) and w.started == []
    w.elect(KEY, "n1")
    assert [(a.assignment, a.reply) for a in w.started] == [(sa, R)]
    assert w.replies == []          # the restorer answers with the deliver subject
    # the group is not grown towards the assignment while the data comes
    w.tick(mono=1)
    assert w.peer_changes == []
    move_to(w, "catchup")
    w.tick(mono=2)
    assert [(c.op, c.peer) for c in w.peer_changes] == [("add", "n2")]


def test_the_other_peers_open_as_non_members_once_the_data_is_in_place(w):
    restoring(w, "n2")
    assert KEY not in w.replicas
    move_to(w, "catchup")
    assert w.groups[KEY].peers == ("n2", "n3")       # itself not a member: it never campaigns
    assert w.to_meta_leader == []


def test_a_stream_being_restored_refuses_publishes_and_changes(w):
    restoring(w, "n1")
    w.elect(KEY, "n1")
    w.take_replies()
    assert w.request("s.a", b"x") is True
    assert answer(w) == {"error": IN_PROGRESS, "stream": "S", "seq": 0}
    w.request("$JS.API.STREAM.PURGE.S")
    assert answer(w)["error"] == IN_PROGRESS
    w.request("$JS.API.STREAM.UPDATE.S", dict(CONFIG, subjects=["t.>"]))
    assert answer(w)["error"] == IN_PROGRESS
    assert w.groups[KEY].proposals == []
    move_to(w, None)
    w.request("s.a", b"x")
    assert len(w.groups[KEY].proposals) == 1 and w.replies == []


def test_leading_a_restore_it_does_not_run_deletes_the_stream(w):
    restoring(w, "n2", phase="catchup")
    w.elect(KEY, "n1")          # the restorer lost its leadership to this server
    assert w.started == []
    assert w.to_meta_leader == [encode_remove_stream("$G", "S")]


def test_a_restorer_without_a_client_to_answer_deletes_the_stream(w):
    restoring(w, "n1", reply=None)      # its meta state came from a snapshot, say
    w.elect(KEY, "n1")
    assert w.started == []
    assert w.to_meta_leader == [encode_remove_stream("$G", "S")]


def test_restore_entries_from_other_servers_are_taken_from_the_restorer_and_its_peers_only(w):
    restoring(w, "n2")
    catchup = encode_restore_state("$G", "S", "catchup")
    remove = encode_remove_stream("$G", "S")
    assert w.c.meta_op("n3", catchup) == []
    assert len(w.c.meta_op("n2", catchup)) == 1
    assert len(w.c.meta_op("n3", remove)) == 1
    move_to(w, None)
    assert w.c.meta_op("n2", remove) == []        # a restored stream is deleted by the API only


# ------------------------------------------------------------------ meta entries


def test_restore_phases_move_on_only_and_are_in_snapshots():
    state = MetaState()
    sa = StreamAssignment("$G", "S", dict(CONFIG), "S-R3F-x", ("n2", "n1", "n3"), T0, preferred="n2",
                          restore="data", restored_by="n2")
    state.apply(encode_assign_stream(sa))
    assert MetaState.restore(state.snapshot()) == state
    (change,) = state.apply(encode_restore_state("$G", "S", "catchup"))
    assert change.kind == "stream_updated" and change.assignment.restore == "catchup"
    assert state.apply(encode_restore_state("$G", "S", "data")) == []       # never back
    assert state.apply(encode_restore_state("$G", "S", "catchup")) == []    # replayed
    (change,) = state.apply(encode_restore_state("$G", "S", None))
    assert change.assignment.restore is None and change.assignment.restored_by == "n2"
    assert state.apply(encode_restore_state("$G", "S", "catchup")) == []    # done is done
    assert state.apply(encode_restore_state("$G", "NOPE", None)) == []
    assert MetaState.restore(state.snapshot()) == state


def test_malformed_restore_entries_are_refused():
    with pytest.raises(MetaEntryError, match="restore phase 'later'"):
        encode_restore_state("$G", "S", "later")
    sa = StreamAssignment("$G", "S", dict(CONFIG), "S-R3F-x", ("n2", "n1", "n3"), T0,
                          restore="data", restored_by="n9")
    with pytest.raises(MetaEntryError, match="restored_by 'n9' is not a peer"):
        encode_assign_stream(sa)
    bad = msgpack.packb({"op": "restore_state", "account": "$G", "name": "S", "state": 3})
    with pytest.raises(MetaEntryError):
        MetaState().apply(bad)


def test_a_second_restore_of_a_name_proposed_meanwhile_is_refused(w):
    w.request("$JS.API.STREAM.RESTORE.S", {"config": CONFIG, "state": {}})
    w.request("$JS.API.STREAM.RESTORE.S", {"config": CONFIG, "state": {}})
    assert answer(w)["error"]["err_code"] == 10130
    assert len(w.meta.proposals) == 1


def test_the_meta_leader_deletes_a_restore_whose_restorer_it_cannot_reach(w):
    """A restorer with no route to the meta leader for RESTORE_LOST_NS (10 s) -- since its
    route went down, or since the meta leader started when the route never came up -- has
    its restore deleted through the meta group; a reachable one is left to finish."""
    from jetraft.jetstream.cluster import RESTORE_LOST_NS
    restoring(w, "n2")
    removal = encode_remove_stream("$G", "S")

    def proposed():
        return [p for p in w.meta.proposals if p == removal]

    w.tick(mono=10**9, now=T0 + RESTORE_LOST_NS * 2)
    assert proposed() == []                         # its route is up
    w.no_route_since["n2"] = T0                     # never up since this server started
    w.tick(mono=2 * 10**9, now=T0 + RESTORE_LOST_NS // 2)
    assert proposed() == []                         # not for long enough yet
    w.tick(mono=3 * 10**9, now=T0 + RESTORE_LOST_NS + 1)
    assert proposed() == [removal]


def test_a_server_never_reached_is_unreachable_since_this_server_started():
    """ClusterJetStream.unreachable_since: None while the route is up; since the route went
    down; since this server started when it never came up."""
    from types import SimpleNamespace

    from jetraft.net.jetstream.cluster import ClusterJetStream
    view = SimpleNamespace(routes=SimpleNamespace(peers={"n2": object()}),
                           _route_down_ns={"n3": T0 + 5}, _started_ns=T0)
    assert ClusterJetStream.unreachable_since(view, "n2") is None
    assert ClusterJetStream.unreachable_since(view, "n3") == T0 + 5
    assert ClusterJetStream.unreachable_since(view, "n4") == T0
