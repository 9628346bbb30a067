"""The JetStream API refuses settings jetraft does not act on before anything is stored or
proposed, and never loads a stored stream or consumer that has one (its files are kept).

Without a server: a JetStreamAccount on a temporary store directory. The clustered path
(the cluster controller refusing before it proposes) is tested in
tests/unit/jetstream_cluster/test_cluster_controller.py.
"""

from __future__ import annotations

import json
import os

import pytest

from jetraft.events import EVENTS
from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.store import GroupCommit

T0 = 1_800_000_000_000_000_000
REPLY = "_INBOX.r"
BATCHED = {"name": "RP", "subjects": ["rp.>"], "allow_batched": True}
#: How jetraft names ``allow_batched`` in its refusal.
FAST = "allow_batched (fast batch publish, nats-server 2.14)"


class Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def emit(self, name: str, **fields) -> None:
        assert name in EVENTS, name
        self.lines.append((name, fields))

    def named(self, name: str) -> list[dict]:
        return [f for n, f in self.lines if n == name]


def new_account(store: str | None) -> JetStreamAccount:
    return JetStreamAccount("$G", store_dir=store, sync=GroupCommit(), events=Events(),
                            interest=lambda s: True, server_version="2.15.1")


def answer(acc: JetStreamAccount, subject: str, body=None) -> dict:
    raw = b"" if body is None else json.dumps(body).encode()
    replies = acc.handle_api(subject, REPLY, None, raw, T0)
    return json.loads(replies[0].out.data)


def refusal(setting: str, err_code: int = 10052) -> dict:
    return {"code": 500, "err_code": err_code, "description": f"{setting} is not supported by jetraft"}


def test_stream_create_refused_before_anything_is_stored(tmp_path):
    acc = new_account(str(tmp_path))
    reply = answer(acc, "$JS.API.STREAM.CREATE.RP", BATCHED)
    assert reply["error"] == refusal(FAST)
    assert acc.streams == {}
    assert not os.path.exists(tmp_path / "jetstream" / "$G" / "streams" / "RP")
    assert acc.events.named("jetstream_stream_created") == []


def test_stream_update_refused_and_the_stored_config_is_unchanged(tmp_path):
    acc = new_account(str(tmp_path))
    assert "error" not in answer(acc, "$JS.API.STREAM.CREATE.U", {"name": "U", "subjects": ["u"]})
    meta = tmp_path / "jetstream" / "$G" / "streams" / "U" / "meta.json"
    before = meta.read_bytes()
    reply = answer(acc, "$JS.API.STREAM.UPDATE.U", {"name": "U", "subjects": ["u"], "allow_batched": True})
    assert reply["error"] == refusal(FAST)
    assert meta.read_bytes() == before
    assert acc.streams["U"].stream.config.allow_batched is False


def test_consumer_create_refused_before_anything_is_stored(tmp_path):
    acc = new_account(str(tmp_path))
    answer(acc, "$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"]})
    body = {"stream_name": "C", "config": {"durable_name": "d", "ack_policy": "explicit",
                                           "deliver_subject": "dl", "sourcing": True}}
    reply = answer(acc, "$JS.API.CONSUMER.CREATE.C.d", body)
    assert reply["error"] == refusal("sourcing", 10012)
    assert acc.streams["C"].consumers == {}
    assert not os.path.exists(tmp_path / "jetstream" / "$G" / "streams" / "C" / "obs" / "d")
    assert acc.consumer_create_refusal("$JS.API.CONSUMER.CREATE.C.d", json.dumps(body).encode()).to_json() \
        == refusal("sourcing", 10012)
    # a request failing an earlier check is not this refusal (handling it answers that)
    assert acc.consumer_create_refusal("$JS.API.CONSUMER.CREATE.C.d", b"{") is None


def _older_jetraft_stream(tmp_path, config: dict, msgs: bytes = b"old records") -> str:
    """The files an older jetraft left for a stream with ``config`` (never loaded here)."""
    sdir = tmp_path / "jetstream" / "$G" / "streams" / config["name"]
    (sdir / "msgs").mkdir(parents=True)
    (sdir / "msgs" / "1.blk").write_bytes(msgs)
    full = {"retention": "limits", "storage": "file", "num_replicas": 1, **config}
    (sdir / "meta.json").write_text(json.dumps({"config": full, "created": T0}))
    return str(sdir)


def test_recovery_does_not_load_a_stored_stream_with_an_unsupported_setting(tmp_path):
    sdir = _older_jetraft_stream(tmp_path, BATCHED)
    before = {name: open(os.path.join(sdir, name), "rb").read() for name in ("meta.json", "msgs/1.blk")}
    acc = new_account(str(tmp_path))
    acc.recover(T0)
    assert "RP" not in acc.streams
    assert acc.stream_for("rp.x") is None          # its subjects take nothing
    (problem,) = acc.events.named("jetstream_recovery_problem")
    assert problem["stream"] == "RP"
    assert problem["detail"] == (f"stream not loaded: unsupported - {FAST} is not supported by jetraft; "
                                 "its files are kept")
    assert {name: open(os.path.join(sdir, name), "rb").read() for name in before} == before
    # A new stream of that name would adopt the old files: refused, the files kept.
    reply = answer(acc, "$JS.API.STREAM.CREATE.RP", {"name": "RP", "subjects": ["rp.>"]})
    assert reply["error"]["err_code"] == 10049
    assert "not loaded" in reply["error"]["description"]
    assert {name: open(os.path.join(sdir, name), "rb").read() for name in before} == before
    assert answer(acc, "$JS.API.STREAM.INFO.RP")["error"] == {
        "code": 500, "err_code": 10194,
        "description": f"stream is offline: unsupported - {FAST} is not supported by jetraft"}


def test_recovery_does_not_load_a_stored_consumer_with_an_unsupported_setting(tmp_path):
    acc = new_account(str(tmp_path))
    answer(acc, "$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"]})
    answer(acc, "$JS.API.CONSUMER.CREATE.C.ok", {"stream_name": "C", "config": {"durable_name": "ok",
                                                                                "ack_policy": "explicit"}})
    acc.close()
    cdir = tmp_path / "jetstream" / "$G" / "streams" / "C" / "obs" / "old"
    cdir.mkdir(parents=True)
    (cdir / "meta.json").write_text(json.dumps({"config": {"durable_name": "old", "ack_policy": "explicit",
                                                           "deliver_subject": "dl", "sourcing": True},
                                                "created": T0}))
    again = new_account(str(tmp_path))
    again.recover(T0)
    # the stream stops rather than remove what the consumer it cannot load still needs
    assert "C" not in again.streams
    assert answer(again, "$JS.API.STREAM.INFO.C")["error"] == {
        "code": 500, "err_code": 10194, "description": 'stream is offline: stopped - unsupported consumer "old"'}
    (problem,) = again.events.named("jetstream_recovery_problem")
    assert (problem["stream"], problem["consumer"]) == ("C", "old")
    assert problem["detail"] == ("consumer not loaded: unsupported - sourcing is not supported by jetraft; "
                                 "its files are kept")
    assert (cdir / "meta.json").exists()


def test_a_replica_with_an_unsupported_setting_is_refused_before_old_files_go(tmp_path):
    """An assignment from an older jetraft's meta log: refused, nothing removed."""
    sdir = _older_jetraft_stream(tmp_path, BATCHED)
    acc = new_account(str(tmp_path))
    with pytest.raises(Exception) as info:
        acc.create_replica({**BATCHED, "storage": "file"}, T0)
    assert info.value.to_json() == refusal(FAST)
    assert os.path.exists(os.path.join(sdir, "msgs", "1.blk"))
    assert "RP" not in acc.streams


def test_max_consumers_and_no_ack_are_enforced():
    acc = new_account(None)
    answer(acc, "$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m"], "storage": "memory",
                                            "max_consumers": 1, "no_ack": True})
    assert "error" not in answer(acc, "$JS.API.CONSUMER.CREATE.M.a", {"stream_name": "M", "config": {"name": "a"}})
    second = answer(acc, "$JS.API.CONSUMER.CREATE.M.b", {"stream_name": "M", "config": {"name": "b"}})
    assert second["error"] == {"code": 400, "err_code": 10026, "description": "maximum consumers limit reached"}
    entry = acc.streams["M"]
    out = acc.publish(entry, "m", REPLY, None, b"x", T0)
    assert [r.out.subject for r in out if r.out.subject == REPLY] == []     # no acknowledgement
    assert entry.stream.store.state().messages == 1


@pytest.mark.parametrize(("allow", "ttl", "error"), [
    (False, "5", {"code": 400, "err_code": 10166, "description": "per-message TTL is disabled"}),
    (False, "bad", {"code": 400, "err_code": 10165, "description": "invalid per-message TTL"}),
    (True, "bad", {"code": 400, "err_code": 10165, "description": "invalid per-message TTL"}),
])
def test_a_ttl_header_is_refused_never_stored(allow, ttl, error):
    acc = new_account(None)
    answer(acc, "$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t"], "storage": "memory",
                                            "allow_msg_ttl": allow})
    entry = acc.streams["T"]
    (reply,) = acc.publish(entry, "t", REPLY, f"NATS/1.0\r\nNats-TTL: {ttl}\r\n\r\n".encode(), b"x", T0)
    assert json.loads(reply.out.data) == {"error": error, "stream": "T", "seq": 0}
    assert entry.stream.store.state().messages == 0


@pytest.mark.parametrize(("config", "reason"), [
    ({"name": "NEW", "subjects": ["new.>"], "metadata": {"_nats.req.level": "9"}},
     "unsupported - required API level: 9, current API level: 5"),
    ({"name": "NEW", "subjects": ["new.>"], "metadata": {"_nats.req.level": "9"}, "allow_future": True},
     'unsupported - config error: unknown field "allow_future"'),
    ({"name": "NEW", "subjects": ["new.>"], "allow_future": True},
     'decoding error: json: unknown field "allow_future"'),
])
def test_a_stream_a_newer_server_stored_is_offline_with_its_reason(tmp_path, config, reason):
    """A stream whose stored config needs a higher API level, or that this server cannot
    decode, is loaded offline as nats-server loads it: listed with its reason, refused with
    it, its files kept (nats-server jetstream.go addStreams, jsStreamListRequest)."""
    sdir = _older_jetraft_stream(tmp_path, config)
    before = open(os.path.join(sdir, "meta.json"), "rb").read()
    acc = new_account(str(tmp_path))
    acc.recover(T0)
    answer(acc, "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a"]})
    listed = answer(acc, "$JS.API.STREAM.LIST")
    assert [i["config"]["name"] for i in listed["streams"]] == ["A"]
    assert (listed["total"], listed["missing"], listed["offline"]) == (2, ["NEW"], {"NEW": reason})
    assert answer(acc, "$JS.API.STREAM.NAMES")["streams"] == ["A", "NEW"]
    offline = {"code": 500, "err_code": 10194, "description": f"stream is offline: {reason}"}
    for subject, body in (("$JS.API.STREAM.INFO.NEW", None), ("$JS.API.STREAM.MSG.GET.NEW", {"seq": 1}),
                          ("$JS.API.STREAM.PURGE.NEW", None), ("$JS.API.STREAM.DELETE.NEW", None),
                          ("$JS.API.CONSUMER.CREATE.NEW.d", {"stream_name": "NEW", "config": {
                              "durable_name": "d"}})):
        assert answer(acc, subject, body)["error"] == offline, subject
    assert acc.stream_for("new.x") is None
    (problem,) = acc.events.named("jetstream_recovery_problem")
    assert problem["detail"] == f"stream not loaded: {reason}; its files are kept"
    assert open(os.path.join(sdir, "meta.json"), "rb").read() == before


def test_a_consumer_a_newer_server_stored_stops_its_stream(tmp_path):
    acc = new_account(str(tmp_path))
    answer(acc, "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"], "retention": "workqueue"})
    answer(acc, "$JS.API.CONSUMER.CREATE.W.new", {"stream_name": "W", "config": {
        "durable_name": "new", "ack_policy": "explicit"}})
    acc.close()
    meta = tmp_path / "jetstream" / "$G" / "streams" / "W" / "obs" / "new" / "meta.json"
    stored = json.loads(meta.read_text())
    stored["config"]["metadata"] = {"_nats.req.level": "7"}
    meta.write_text(json.dumps(stored))
    again = new_account(str(tmp_path))
    again.recover(T0)
    assert answer(again, "$JS.API.STREAM.LIST")["offline"] == {"W": 'stopped - unsupported consumer "new"'}
    (problem,) = again.events.named("jetstream_recovery_problem")
    assert problem["detail"] == ("consumer not loaded: unsupported - required API level: 7, current API level: 5; "
                                 "its files are kept")
