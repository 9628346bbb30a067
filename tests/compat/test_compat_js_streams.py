"""JetStream streams as nats-py sees them, against jetraft and nats-server.

Stream CRUD through ``nc.jsm()``, the raw ``$JS.API.STREAM.*`` answers (error triples
and response "type" strings), account info, listing, limits, purge, message get and
delete, and direct get.  Comments marked "nats-server:" record answers that surprise.
"""

from __future__ import annotations

import base64
import re

import nats.errors
import pytest
from compat_support import connect, run
from js_support import (
    ACCOUNT_INFO_RESPONSE,
    NS,
    STREAM_CREATE_RESPONSE,
    STREAM_INFO_RESPONSE,
    STREAM_LIST_RESPONSE,
    STREAM_MSG_GET_RESPONSE,
    STREAM_NAMES_RESPONSE,
    api_error,
    error_triple,
    js_session,
)
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NoStreamResponseError, NotFoundError
from polling import apoll

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
ZERO_TIME = "0001-01-01T00:00:00Z"

#: The config nats-server answers for ``{"name": N, "subjects": [...]}`` (bar metadata).
DEFAULT_CONFIG = {
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 120 * NS,
    "compression": "none",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "consumer_limits": {},
    "allow_msg_ttl": False,
}

EMPTY_STATE = {
    "messages": 0,
    "bytes": 0,
    "first_seq": 0,
    "first_ts": ZERO_TIME,
    "last_seq": 0,
    "last_ts": ZERO_TIME,
    "consumer_count": 0,
}

BAD_NAME = (500, 10052, "stream name is required and can not contain '.', '*', '>', '\\', '/'")
NAME_MISMATCH = {"code": 400, "err_code": 10056, "description": "stream name in subject does not match request"}
NOT_FOUND = (404, 10059, "stream not found")
NO_MESSAGE = (404, 10037, "no message found")


def file_bytes(subject: str, payload: bytes, headers: bytes = b"") -> int:
    """nats-server's file-store accounting of one message.

    22 + subject + headers + payload + 8 (hash), plus 4 (a header length) when there are headers.
    """
    return 22 + len(subject) + len(headers) + len(payload) + 8 + (4 if headers else 0)


def mem_bytes(subject: str, payload: bytes, headers: bytes = b"") -> int:
    """nats-server's memory-store accounting of one message: subject + headers + payload + 16."""
    return len(subject) + len(headers) + len(payload) + 16


def check_metadata(meta: dict) -> None:
    """Server metadata on a created stream/consumer: API level strings and the version."""
    assert set(meta) == {"_nats.level", "_nats.req.level", "_nats.ver"}, meta
    assert meta["_nats.req.level"] == "0"
    assert meta["_nats.level"].isdigit()
    assert re.match(r"^2\.\d+\.\d+", meta["_nats.ver"])


def test_create_response_exact(js_server):
    """STREAM.CREATE answers the defaulted config, an empty state, did_create and times."""

    async def scenario():
        async with js_session(js_server.url) as s:
            reply = await s.api("$JS.API.STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.*"]})
            assert reply["type"] == STREAM_CREATE_RESPONSE
            config = reply["config"]
            check_metadata(config.pop("metadata"))
            assert config == {"name": "ORDERS", "subjects": ["orders.*"], **DEFAULT_CONFIG}
            assert reply["state"] == EMPTY_STATE
            assert reply["did_create"] is True
            assert RFC3339.match(reply["created"]) and RFC3339.match(reply["ts"])
            assert set(reply) == {"type", "config", "created", "state", "ts", "did_create"}

            # STREAM.INFO: the same config; nats-server adds paging fields that are all 0
            # (total/offset/limit, meaningful only with subjects_filter) and cluster.leader
            # (the server's id) even when not clustered.
            info = await s.api("$JS.API.STREAM.INFO.ORDERS")
            assert info["type"] == STREAM_INFO_RESPONSE
            assert (info["total"], info["offset"], info["limit"]) == (0, 0, 0)
            assert info["created"] == reply["created"]
            assert info["state"] == EMPTY_STATE
            assert isinstance(info["cluster"]["leader"], str) and info["cluster"]["leader"]
            assert "did_create" not in info
            config = info["config"]
            check_metadata(config.pop("metadata"))
            assert config == {"name": "ORDERS", "subjects": ["orders.*"], **DEFAULT_CONFIG}

    run(scenario)


def test_add_stream_info_update_delete(js_server):
    """nats-py add_stream / stream_info / update_stream / delete_stream round trip."""

    async def scenario():
        async with js_session(js_server.url) as s:
            info = await s.jsm.add_stream(name="ORDERS", subjects=["orders.*"], storage=StorageType.MEMORY)
            assert info.config.name == "ORDERS"
            assert info.config.subjects == ["orders.*"]
            assert info.config.retention == RetentionPolicy.LIMITS
            assert info.config.storage == StorageType.MEMORY
            assert info.config.discard == DiscardPolicy.OLD
            assert info.config.duplicate_window == 120.0
            assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (0, 0, 0)

            # Creating again with the identical config is idempotent.
            # nats-server: the repeat also answers did_create: true.
            again = await s.api("$JS.API.STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.*"],
                                                                 "storage": "memory"})
            assert "error" not in again, again
            assert again["did_create"] is True
            # ... but with a different config it is refused.
            clash = await s.api("$JS.API.STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.>"],
                                                                 "storage": "memory"})
            assert clash["error"] == {"code": 400, "err_code": 10058,
                                      "description": "stream name already in use with a different configuration"}

            await s.js.publish("orders.1", b"one")
            updated = await s.jsm.update_stream(StreamConfig(name="ORDERS", subjects=["orders.*", "returns.*"],
                                                             storage=StorageType.MEMORY, max_msgs=10))
            assert updated.config.subjects == ["orders.*", "returns.*"]
            assert updated.config.max_msgs == 10
            assert updated.state.messages == 1
            ack = await s.js.publish("returns.1", b"back")
            assert (ack.stream, ack.seq) == ("ORDERS", 2)

            info = await s.jsm.stream_info("ORDERS")
            assert info.config.max_msgs == 10 and info.state.messages == 2 and info.state.last_seq == 2

            # Changing the storage type is refused.
            err = await api_error(s.jsm.update_stream(StreamConfig(name="ORDERS", subjects=["orders.*"],
                                                                   storage=StorageType.FILE)))
            assert error_triple(err) == (500, 10052, "stream configuration update can not change storage type")

            assert await s.jsm.delete_stream("ORDERS") is True
            err = await api_error(s.jsm.stream_info("ORDERS"))
            assert isinstance(err, NotFoundError)
            assert error_triple(err) == NOT_FOUND
            assert error_triple(await api_error(s.jsm.delete_stream("ORDERS"))) == NOT_FOUND
            assert error_triple(await api_error(s.jsm.update_stream(name="ORDERS"))) == NOT_FOUND

    run(scenario)


def test_missing_stream_error_types(js_server):
    """Each API names its own response type, even when the stream is missing."""

    async def scenario():
        async with js_session(js_server.url) as s:
            err = {"code": 404, "err_code": 10059, "description": "stream not found"}
            for verb, type_name, body in [
                ("INFO", "stream_info_response", None),
                ("DELETE", "stream_delete_response", None),
                ("UPDATE", "stream_update_response", {"name": "NOPE"}),
                ("PURGE", "stream_purge_response", None),
                ("MSG.GET", "stream_msg_get_response", {"seq": 1}),
                ("MSG.DELETE", "stream_msg_delete_response", {"seq": 1}),
            ]:
                reply = await s.api(f"$JS.API.STREAM.{verb}.NOPE", body)
                assert reply["type"] == f"io.nats.jetstream.api.v1.{type_name}", verb
                assert reply["error"] == err, verb

    run(scenario)


def test_cluster_requests_on_a_single_server(js_server):
    """Step-down and peer-remove need a cluster: 10010, whether or not the stream exists."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.js.add_stream(name="ONE", subjects=["one.>"])
            err = {"code": 503, "err_code": 10010, "description": "JetStream clustering support required"}
            for subject, type_name, body in [
                ("STREAM.LEADER.STEPDOWN.ONE", "stream_leader_stepdown_response", None),
                ("STREAM.LEADER.STEPDOWN.NOPE", "stream_leader_stepdown_response", None),
                ("STREAM.PEER.REMOVE.ONE", "stream_remove_peer_response", {"peer": "n2"}),
            ]:
                reply = await s.api(f"$JS.API.{subject}", body)
                assert reply == {"type": f"io.nats.jetstream.api.v1.{type_name}", "error": err}, subject

    run(scenario)


def test_streams_info_and_names(js_server):
    """streams_info and STREAM.NAMES list every stream, sorted by name."""

    async def scenario():
        async with js_session(js_server.url) as s:
            for name in ["ZULU", "ALPHA", "MIKE"]:
                await s.jsm.add_stream(name=name, subjects=[f"{name.lower()}.>"])
            infos = await s.jsm.streams_info()
            assert [i.config.name for i in infos] == ["ALPHA", "MIKE", "ZULU"]
            assert [i.config.subjects for i in infos] == [["alpha.>"], ["mike.>"], ["zulu.>"]]

            names = await s.api("$JS.API.STREAM.NAMES")
            assert names == {"type": STREAM_NAMES_RESPONSE, "total": 3, "offset": 0, "limit": 1024,
                             "streams": ["ALPHA", "MIKE", "ZULU"]}
            listed = await s.api("$JS.API.STREAM.LIST")
            assert listed["type"] == STREAM_LIST_RESPONSE
            assert (listed["total"], listed["offset"], listed["limit"]) == (3, 0, 256)
            assert [st["config"]["name"] for st in listed["streams"]] == ["ALPHA", "MIKE", "ZULU"]
            # nats-server: in LIST, config.metadata holds only the stored "_nats.req.level",
            # not the "_nats.level"/"_nats.ver" that CREATE and INFO add.
            assert all(st["config"]["metadata"] == {"_nats.req.level": "0"} for st in listed["streams"])
            assert set(listed["streams"][0]) == {"config", "created", "state", "ts"}

            await s.jsm.delete_stream("MIKE")
            names = await s.api("$JS.API.STREAM.NAMES")
            assert names["streams"] == ["ALPHA", "ZULU"] and names["total"] == 2

    run(scenario)


def test_stream_names_subject_filter_and_offset(js_server):
    """STREAM.NAMES / LIST with a subject filter and an offset."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="A", subjects=["a.>"])
            await s.jsm.add_stream(name="B", subjects=["b.*"])
            await s.jsm.add_stream(name="C", subjects=["c.x", "b.y.z"])

            async def names(body):
                reply = await s.api("$JS.API.STREAM.NAMES", body)
                assert reply["type"] == STREAM_NAMES_RESPONSE
                return reply["total"], reply["offset"], reply["streams"]

            assert await names({"subject": "a.x"}) == (1, 0, ["A"])
            assert await names({"subject": "b.*"}) == (1, 0, ["B"])
            assert await names({"subject": "b.>"}) == (2, 0, ["B", "C"])
            assert await names({"subject": ">"}) == (3, 0, ["A", "B", "C"])
            assert await names({"offset": 1}) == (3, 1, ["B", "C"])
            # nats-server: an empty page answers "streams": null, never [] (past the end,
            # no match, no streams at all).
            assert await names({"offset": 3}) == (3, 3, None)
            assert await names({"subject": "zzz"}) == (0, 0, None)

            listed = await s.api("$JS.API.STREAM.LIST", {"subject": "c.x"})
            assert listed["total"] == 1
            assert [st["config"]["name"] for st in listed["streams"]] == ["C"]
            listed = await s.api("$JS.API.STREAM.LIST", {"offset": 2})
            assert (listed["total"], listed["offset"]) == (3, 2)
            assert [st["config"]["name"] for st in listed["streams"]] == ["C"]

            assert (await s.jsm.find_stream_name_by_subject("b.y.z")) == "C"

    run(scenario)


def test_wildcard_subjects(js_server):
    """A stream on `*` and `>` subjects stores what matches; other subjects find no stream."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="W", subjects=["w.*", "x.>"])
            acks = [await s.js.publish(subj, subj.encode()) for subj in ["w.a", "x.a", "x.a.b.c", "w.b"]]
            assert [(a.stream, a.seq) for a in acks] == [("W", 1), ("W", 2), ("W", 3), ("W", 4)]
            for subject in ["w.a.b", "w", "x"]:
                with pytest.raises(NoStreamResponseError):
                    await s.js.publish(subject, b"nope")
            info = await s.jsm.stream_info("W", subjects_filter=">")
            assert info.state.messages == 4
            assert info.state.subjects == {"w.a": 1, "x.a": 1, "x.a.b.c": 1, "w.b": 1}

    run(scenario)


def test_overlapping_subjects_refused(js_server):
    """A second stream whose subjects overlap an existing stream's is refused, also on update."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="A", subjects=["orders.>"])
            await s.jsm.add_stream(name="B", subjects=["items.*"])
            overlap = (400, 10065, "subjects overlap with an existing stream")
            for subjects in (["orders.new"], ["orders.*"], ["orders.*.z"], ["items.a"], ["x", "orders.>"]):
                err = await api_error(s.jsm.add_stream(name="C", subjects=subjects))
                assert error_triple(err) == overlap, subjects
            err = await api_error(s.jsm.update_stream(name="B", subjects=["items.*", "orders.1"]))
            assert error_triple(err) == overlap
            # nats-server: ">" (and subjects over $JS.API) is not an overlap error but 10052.
            err = await api_error(s.jsm.add_stream(name="C", subjects=[">"]))
            assert error_triple(err) == (500, 10052, "capturing all subjects requires no-ack to be true")
            # nats-server: so is any subject with a leading `*` ("*.x" could match "$JS.x").
            for subjects in (["$JS.API.>"], ["*.x"], ["*.new"]):
                err = await api_error(s.jsm.add_stream(name="C", subjects=subjects))
                assert error_triple(err) == (500, 10052,
                                             "subjects that overlap with jetstream api require no-ack to be true")
            # Not overlapping: a sibling token, a longer subject under `*`.
            await s.jsm.add_stream(name="D", subjects=["items.a.b", "ordersx"])
            assert await s.api("$JS.API.STREAM.NAMES") == {"type": STREAM_NAMES_RESPONSE, "total": 3,
                                                            "offset": 0, "limit": 1024,
                                                            "streams": ["A", "B", "D"]}

    run(scenario)


def test_invalid_stream_names_refused(js_server):
    """Names with `*`, `>` (as subject tokens) are refused; the name must match the subject."""

    async def scenario():
        async with js_session(js_server.url) as s:
            for name in ["a*", "a>", "*", ">", "x*y"]:
                reply = await s.api(f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": ["z"]})
                assert reply["type"] == STREAM_CREATE_RESPONSE
                assert error_triple_json(reply) == BAD_NAME, name
            # A name with `.` or a space cannot be the subject's last token; sent under
            # another name, the body is refused as a mismatch.
            for name in ["a.b", "a b", "a\\b"]:
                reply = await s.api("$JS.API.STREAM.CREATE.X", {"name": name})
                assert reply == {"type": STREAM_CREATE_RESPONSE, "error": NAME_MISMATCH}, name
            # nats-server: CREATE.a.b (a name with a dot) matches none of its API subjects
            # but the $JS.API.> import swallows it: no reply at all, not even no-responders.
            with pytest.raises(nats.errors.TimeoutError):
                await s.nc.request("$JS.API.STREAM.CREATE.a.b", b'{"name":"a.b"}', timeout=0.5)
            # nats-py itself refuses such names before sending anything.
            for name in ["a.b", "a b", "a*", "a>"]:
                with pytest.raises(ValueError):
                    await s.jsm.add_stream(name=name, subjects=["q"])
            names = await s.api("$JS.API.STREAM.NAMES")
            assert names["total"] == 0 and names["streams"] is None

    run(scenario)


def error_triple_json(reply: dict) -> tuple:
    """(code, err_code, description) of a raw API reply's error."""
    err = reply["error"]
    return err["code"], err["err_code"], err["description"]


def test_replicas_refused_when_not_clustered(js_server):
    """num_replicas 3 on a single server is refused with nats-server's error."""

    async def scenario():
        async with js_session(js_server.url) as s:
            err = await api_error(s.jsm.add_stream(name="R3", subjects=["r3"], num_replicas=3))
            assert error_triple(err) == (500, 10074, "replicas > 1 not supported in non-clustered mode")
            # The wire form escapes ">" as \u003e, as Go's encoder does.
            msg = await s.nc.request("$JS.API.STREAM.CREATE.R3", b'{"name":"R3","num_replicas":3}', timeout=5)
            assert b"replicas \\u003e 1 not supported" in msg.data
            info = await s.jsm.add_stream(name="R1", subjects=["r1"], num_replicas=1)
            assert info.config.num_replicas == 1

    run(scenario)


def test_raw_create_errors(js_server):
    """Unknown fields, malformed JSON, empty bodies and mismatched names, answered raw."""

    async def scenario():
        async with js_session(js_server.url) as s:
            subject = "$JS.API.STREAM.CREATE.X"
            reply = await s.api(subject, {"name": "X", "bogus": 1})
            assert reply == {"type": STREAM_CREATE_RESPONSE, "error": {
                "code": 400, "err_code": 10025, "description": 'invalid JSON: json: unknown field "bogus"'}}
            # Go's encoding/json error text, offset counted in bytes from 1.
            reply = await s.api(subject, raw=b"{not json")
            assert reply == {"type": STREAM_CREATE_RESPONSE, "error": {
                "code": 400, "err_code": 10025,
                "description": "invalid JSON: invalid character 'n' looking for beginning of object key string"
                               " at offset 2"}}
            # nats-server: an empty body is not a JSON error but a name mismatch (name "").
            for raw in (b"", b"{}", b'{"subjects":["x"]}', b'{"name":"Y"}'):
                reply = await s.api(subject, raw=raw)
                assert reply == {"type": STREAM_CREATE_RESPONSE, "error": NAME_MISMATCH}, raw
            assert (await s.api("$JS.API.STREAM.NAMES"))["total"] == 0

    run(scenario)


def test_account_info(js_server):
    """$JS.API.INFO: usage by storage type, counts, unlimited limits and API statistics."""

    async def scenario():
        async with js_session(js_server.url) as s:
            info = await s.api("$JS.API.INFO")
            assert info == {
                "type": ACCOUNT_INFO_RESPONSE, "memory": 0, "storage": 0, "reserved_memory": 0,
                "reserved_storage": 0, "streams": 0, "consumers": 0,
                "limits": {"max_memory": -1, "max_storage": -1, "max_streams": -1, "max_consumers": -1,
                           "max_ack_pending": -1, "memory_max_stream_bytes": -1,
                           "storage_max_stream_bytes": -1, "max_bytes_required": False},
                "api": {"level": info["api"]["level"], "total": 0, "errors": 0},
            }
            assert isinstance(info["api"]["level"], int) and info["api"]["level"] >= 1

            # Four requests count (one an error).  nats-server: an INFO request is counted
            # after it is answered, so the first INFO above showed 0 but counts from now.
            await s.api("$JS.API.STREAM.CREATE.F", {"name": "F", "subjects": ["f"]})
            await s.api("$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m"], "storage": "memory"})
            await s.api("$JS.API.STREAM.INFO.NOPE")
            await s.api("$JS.API.CONSUMER.CREATE.F.C", {"stream_name": "F",
                                                        "config": {"durable_name": "C", "ack_policy": "explicit"}})
            await s.js.publish("f", b"file data")
            await s.js.publish("m", b"memory", headers={"Foo": "bar"})
            hdr = b"NATS/1.0\r\nFoo: bar\r\n\r\n"

            info = await s.api("$JS.API.INFO")
            assert (info["streams"], info["consumers"]) == (2, 1)
            # nats-server's per-message accounting differs by store (see file_bytes/mem_bytes).
            assert info["storage"] == file_bytes("f", b"file data")
            assert info["memory"] == mem_bytes("m", b"memory", hdr)
            assert info["api"]["total"] == 1 + 4 and info["api"]["errors"] == 1

            acct = await s.jsm.account_info()
            assert (acct.streams, acct.consumers, acct.memory, acct.storage) == (2, 1, info["memory"],
                                                                               info["storage"])
            assert acct.limits.max_streams == -1 and acct.limits.max_consumers == -1
            assert acct.api.total == 6 and acct.api.errors == 1

    run(scenario)


def test_stream_bytes_accounting(js_server):
    """state.bytes per store type follows nats-server's per-message overheads."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="F", subjects=["f.>"])
            await s.jsm.add_stream(name="M", subjects=["m.>"], storage=StorageType.MEMORY)
            hdr = b"NATS/1.0\r\nA: 1\r\n\r\n"
            for prefix in "fm":
                await s.js.publish(f"{prefix}.one", b"hello")
                await s.js.publish(f"{prefix}.two", b"", headers={"A": "1"})
            f = await s.jsm.stream_info("F")
            m = await s.jsm.stream_info("M")
            assert f.state.bytes == file_bytes("f.one", b"hello") + file_bytes("f.two", b"", hdr)
            assert m.state.bytes == mem_bytes("m.one", b"hello") + mem_bytes("m.two", b"", hdr)

    run(scenario)


def test_max_msgs_discard_old_and_new(js_server):
    """max_msgs: discard old drops the oldest; discard new refuses with 10077."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="OLD", subjects=["old"], max_msgs=3)
            await s.publish_many("old", [b"%d" % i for i in range(5)])
            info = await s.jsm.stream_info("OLD")
            assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 3, 5)
            assert (await s.jsm.get_msg("OLD", 3)).data == b"2"
            assert error_triple(await api_error(s.jsm.get_msg("OLD", 2))) == NO_MESSAGE

            await s.jsm.add_stream(name="NEW", subjects=["new"], max_msgs=2, discard=DiscardPolicy.NEW)
            assert await s.publish_many("new", [b"a", b"b"]) == [1, 2]
            err = await api_error(s.js.publish("new", b"c"))
            assert error_triple(err) == (503, 10077, "maximum messages exceeded")
            # nats-server's pub-ack error also names the stream and seq 0.
            raw = await s.nc.request("new", b"d", timeout=5)
            assert raw.data == (b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},'
                                b'"stream":"NEW","seq":0}')
            info = await s.jsm.stream_info("NEW")
            assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (2, 1, 2)

    run(scenario)


def test_max_bytes_discard_old_and_new(js_server):
    """max_bytes counts stored bytes; discard new refuses with 10077 "maximum bytes exceeded"."""

    async def scenario():
        async with js_session(js_server.url) as s:
            one = file_bytes("b", b"0123456789")  # 43 bytes on nats-server's file store
            await s.jsm.add_stream(name="OLD", subjects=["b"], max_bytes=2 * one)
            await s.publish_many("b", [b"0123456789"] * 4)
            info = await s.jsm.stream_info("OLD")
            assert (info.state.messages, info.state.bytes, info.state.first_seq) == (2, 2 * one, 3)

            await s.jsm.add_stream(name="NEW", subjects=["n"], max_bytes=2 * one, discard=DiscardPolicy.NEW)
            assert await s.publish_many("n", [b"0123456789"] * 2) == [1, 2]
            err = await api_error(s.js.publish("n", b"0123456789"))
            # nats-server: the bytes limit shares err_code 10077 with max_msgs, other text.
            assert error_triple(err) == (503, 10077, "maximum bytes exceeded")
            info = await s.jsm.stream_info("NEW")
            assert (info.state.messages, info.state.bytes) == (2, 2 * one)

    run(scenario)


def test_max_age_expires_messages(js_server):
    """Messages older than max_age disappear; duplicate_window is capped to max_age."""

    async def scenario():
        async with js_session(js_server.url) as s:
            reply = await s.api("$JS.API.STREAM.CREATE.AGE", {"name": "AGE", "subjects": ["age"],
                                                              "max_age": NS // 2})
            # nats-server: duplicate_window defaults to max_age when max_age < 2 minutes.
            assert (reply["config"]["max_age"], reply["config"]["duplicate_window"]) == (NS // 2, NS // 2)
            await s.publish_many("age", [b"1", b"2"])
            assert (await s.jsm.stream_info("AGE")).state.messages == 2

            async def expired():
                st = (await s.jsm.stream_info("AGE")).state
                return st.messages == 0

            await apoll(expired, "messages to expire", 5, retry_on=())
            st = (await s.jsm.stream_info("AGE")).state
            # Sequences survive expiry: first_seq moves past the last.
            assert (st.first_seq, st.last_seq, st.bytes) == (3, 2, 0)
            assert (await s.js.publish("age", b"3")).seq == 3

    run(scenario)


def test_max_msg_size_and_max_payload(js_server):
    """Over max_msg_size: 10054; max_msg_size above max_payload is accepted, max_payload rules."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="S", subjects=["s"], max_msg_size=10)
            assert (await s.js.publish("s", b"0123456789")).seq == 1
            err = await api_error(s.js.publish("s", b"0123456789A"))
            assert error_triple(err) == (400, 10054, "message size exceeds maximum allowed")
            # Headers count towards the size.
            err = await api_error(s.js.publish("s", b"0", headers={"K": "v"}))
            assert error_triple(err) == (400, 10054, "message size exceeds maximum allowed")
            assert (await s.jsm.stream_info("S")).state.messages == 1

            # nats-server accepts a max_msg_size above the connection's max_payload (1 MiB) ...
            info = await s.jsm.add_stream(name="BIG", subjects=["big"], max_msg_size=2 * 1024 * 1024)
            assert info.config.max_msg_size == 2 * 1024 * 1024
            # ... but no message over max_payload reaches it: nats-py refuses to send one.
            assert s.nc.max_payload == 1024 * 1024
            with pytest.raises(nats.errors.MaxPayloadError):
                await s.js.publish("big", b"x" * (s.nc.max_payload + 1))
            assert (await s.js.publish("big", b"x" * 1000)).seq == 1

    run(scenario)


def test_max_msgs_per_subject(js_server):
    """Per-subject limit: old messages of that subject go; discard_new_per_subject refuses."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="KV", subjects=["kv.>"], max_msgs_per_subject=2)
            for i in range(4):
                await s.js.publish("kv.a", b"a%d" % i)
                await s.js.publish("kv.b", b"b%d" % i)
            info = await s.jsm.stream_info("KV", subjects_filter=">")
            assert info.state.messages == 4 and info.state.subjects == {"kv.a": 2, "kv.b": 2}
            assert (info.state.first_seq, info.state.last_seq) == (5, 8)
            assert (await s.jsm.get_msg("KV", subject="kv.a")).data == b"a3"

            # nats-server: discard new alone does not refuse per subject; old ones go.
            await s.jsm.add_stream(name="Q", subjects=["q.>"], max_msgs_per_subject=1, discard=DiscardPolicy.NEW)
            assert await s.publish_many("q.a", [b"1", b"2"]) == [1, 2]
            assert (await s.jsm.stream_info("Q")).state.messages == 1

            await s.jsm.add_stream(name="P", subjects=["p.>"], max_msgs_per_subject=1, discard=DiscardPolicy.NEW,
                                   discard_new_per_subject=True)
            assert (await s.js.publish("p.a", b"1")).seq == 1
            err = await api_error(s.js.publish("p.a", b"2"))
            assert error_triple(err) == (503, 10077, "maximum messages per subject exceeded")
            assert (await s.js.publish("p.b", b"3")).seq == 2

    run(scenario)


def test_purge(js_server):
    """Purge all, by subject filter, up to a sequence, and keeping the last N."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="P", subjects=["p.*"])

            async def purge(body) -> dict:
                reply = await s.api("$JS.API.STREAM.PURGE.P", body)
                assert reply["type"] == "io.nats.jetstream.api.v1.stream_purge_response"
                return reply

            async def state():
                return (await s.jsm.stream_info("P", subjects_filter=">")).state

            for i in range(10):  # seqs 1..10: a, b, a, b, ...
                await s.js.publish("p.a" if i % 2 == 0 else "p.b", b"%d" % i)

            assert await purge({"filter": "p.a", "keep": 2}) == {
                "type": "io.nats.jetstream.api.v1.stream_purge_response", "success": True, "purged": 3}
            st = await state()
            assert st.subjects == {"p.a": 2, "p.b": 5} and st.first_seq == 2

            assert (await purge({"seq": 6}))["purged"] == 2  # seqs 2 and 4 (p.b) are below 6
            st = await state()
            assert st.first_seq == 6 and st.messages == 5

            assert (await purge({"keep": 1}))["purged"] == 4
            st = await state()
            assert (st.messages, st.first_seq, st.last_seq) == (1, 10, 10)

            assert await s.jsm.purge_stream("P") is True
            st = await state()
            assert (st.messages, st.bytes, st.first_seq, st.last_seq) == (0, 0, 11, 10)
            assert (await s.js.publish("p.a", b"next")).seq == 11

            # nats-server: seq and keep together are a bad request (and still carry purged: 0).
            assert await purge({"seq": 2, "keep": 1}) == {
                "type": "io.nats.jetstream.api.v1.stream_purge_response",
                "error": {"code": 400, "err_code": 10003, "description": "bad request"}, "purged": 0}
            # nats-server: purging up to a sequence past the end moves first_seq there,
            # leaving first_seq > last_seq + 1.
            assert (await purge({"seq": 100}))["purged"] == 1
            st = await state()
            assert (st.messages, st.first_seq, st.last_seq) == (0, 100, 99)

    run(scenario)


def test_get_msg(js_server):
    """STREAM.MSG.GET by sequence, last by subject and next by subject, with headers."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="G", subjects=["g.*"])
            await s.js.publish("g.a", b"a1")
            await s.js.publish("g.b", b"b1", headers={"X-Key": "v1"})
            await s.js.publish("g.a", b"a2")

            msg = await s.jsm.get_msg("G", 2)
            assert (msg.subject, msg.seq, msg.data) == ("g.b", 2, b"b1")
            assert msg.headers == {"X-Key": "v1"}
            last = await s.jsm.get_msg("G", subject="g.a")
            assert (last.seq, last.data) == (3, b"a2")
            nxt = await s.jsm.get_msg("G", seq=2, subject="g.a", next=True)
            assert (nxt.seq, nxt.data) == (3, b"a2")

            reply = await s.api("$JS.API.STREAM.MSG.GET.G", {"seq": 2})
            assert reply["type"] == STREAM_MSG_GET_RESPONSE
            raw = reply["message"]
            assert set(raw) == {"subject", "seq", "hdrs", "data", "time"}
            assert base64.b64decode(raw["hdrs"]) == b"NATS/1.0\r\nX-Key: v1\r\n\r\n"
            assert base64.b64decode(raw["data"]) == b"b1"
            assert RFC3339.match(raw["time"])
            # nats-server: an empty payload omits "data"; no headers omits "hdrs".
            await s.js.publish("g.c", b"")
            raw = (await s.api("$JS.API.STREAM.MSG.GET.G", {"seq": 4}))["message"]
            assert set(raw) == {"subject", "seq", "time"}

            for body in ({"seq": 99}, {"last_by_subj": "g.z"}, {"seq": 4, "next_by_subj": "g.a"}):
                reply = await s.api("$JS.API.STREAM.MSG.GET.G", body)
                assert reply["error"] == {"code": 404, "err_code": 10037, "description": "no message found"}, body
            for body in ({}, {"seq": 2, "last_by_subj": "g.a"}):
                reply = await s.api("$JS.API.STREAM.MSG.GET.G", body)
                assert reply["error"] == {"code": 400, "err_code": 10003, "description": "bad request"}, body

    run(scenario)


def test_delete_msg(js_server):
    """STREAM.MSG.DELETE removes one message; deleting it again is 10043."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="D", subjects=["d"])
            await s.publish_many("d", [b"1", b"2", b"3", b"4"])
            assert await s.jsm.delete_msg("D", 2) is True
            err = await api_error(s.jsm.delete_msg("D", 2))
            assert error_triple(err) == (400, 10043, "sequence 2 not found")
            assert error_triple(await api_error(s.jsm.get_msg("D", 2))) == NO_MESSAGE
            reply = await s.api("$JS.API.STREAM.INFO.D", {"deleted_details": True})
            st = reply["state"]
            assert (st["messages"], st["first_seq"], st["last_seq"], st["num_deleted"]) == (3, 1, 4, 1)
            assert st["deleted"] == [2]
            # Deleting the first message moves first_seq.
            assert await s.jsm.delete_msg("D", 1) is True
            st = (await s.jsm.stream_info("D")).state
            assert (st.messages, st.first_seq, st.last_seq) == (2, 3, 4)
            nxt = await s.jsm.get_msg("D", seq=1, subject="d", next=True)
            assert nxt.seq == 3

    run(scenario)


def test_direct_get(js_server):
    """allow_direct: $JS.API.DIRECT.GET answers the message itself, with Nats-* headers."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="DG", subjects=["dg.*"], allow_direct=True)
            await s.js.publish("dg.a", b"a1")
            await s.js.publish("dg.b", b"b1", headers={"X-Key": "v"})
            await s.js.publish("dg.a", b"a2")

            msg = await s.jsm.get_msg("DG", 2, direct=True)
            assert (msg.subject, msg.seq, msg.data) == ("dg.b", 2, b"b1")
            assert msg.headers["X-Key"] == "v"
            last = await s.jsm.get_msg("DG", subject="dg.a", direct=True)
            assert (last.seq, last.data) == (3, b"a2")

            raw = await s.nc.request("$JS.API.DIRECT.GET.DG", b'{"seq":1}', timeout=5)
            assert raw.data == b"a1"
            assert raw.headers["Nats-Stream"] == "DG"
            assert raw.headers["Nats-Subject"] == "dg.a"
            assert raw.headers["Nats-Sequence"] == "1"
            assert RFC3339.match(raw.headers["Nats-Time-Stamp"])
            raw = await s.nc.request("$JS.API.DIRECT.GET.DG.dg.b", b"", timeout=5)
            assert (raw.data, raw.headers["Nats-Sequence"]) == (b"b1", "2")

            with pytest.raises(NotFoundError):
                await s.jsm.get_msg("DG", 99, direct=True)
            raw = await s.nc.request("$JS.API.DIRECT.GET.DG", b'{"seq":99}', timeout=5)
            assert (raw.headers["Status"], raw.headers["Description"], raw.data) == ("404", "Message Not Found", b"")
            # nats-server: an empty request answers status 408 "Empty Request".
            raw = await s.nc.request("$JS.API.DIRECT.GET.DG", b"{}", timeout=5)
            assert (raw.headers["Status"], raw.headers["Description"]) == ("408", "Empty Request")

            # Without allow_direct nobody listens on DIRECT.GET for the stream.
            await s.jsm.add_stream(name="ND", subjects=["nd"])
            await s.js.publish("nd", b"x")
            with pytest.raises(nats.errors.NoRespondersError):
                await s.nc.request("$JS.API.DIRECT.GET.ND", b'{"seq":1}', timeout=5)

    run(scenario)


def test_stream_survives_in_listing_after_reconnect(js_server):
    """A second connection sees the same streams and messages (state lives in the server)."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="S", subjects=["s"])
            await s.publish_many("s", [b"1", b"2"])
        nc = await connect(js_server.url)
        try:
            info = await nc.jsm().stream_info("S")
            assert (info.state.messages, info.state.last_seq) == (2, 2)
        finally:
            await nc.close()

    run(scenario)
