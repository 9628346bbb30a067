"""Atomic batch publish (jetraft.jetstream.batch, jetstream/api/batches.py), sans-IO: hostile
headers and ids, the staging's bounds (messages, batches, bytes, idle time), the checks of a
committed batch against the stream as it was before it (nats-server
checkMsgHeadersPreClusteredProposal), all-or-nothing storing, the "B" entry a clustered
stream replicates a batch in (decoded with the same suspicion as any entry), and the
BATCH_ABANDONED advisory: each abandonment's reason, the timers of idle batches (oldest
first, bounded), the account's and the system account's copies, and a cluster leader's own
tick (a leader change drops a batch without one)."""

from __future__ import annotations

import json

import msgpack
import pytest

from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.batch import AtomicBatches, batch_id, check_batch
from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.replicated import BATCH, PUBLISH, EntryError, InterestOverride, StreamReplica, decode_entry, encode_entry
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream
from jetraft.raft.types import Entry, EntryType
from jetraft.storage import GroupCommit

T0 = 1_800_000_000_000_000_000
SECOND = 1_000_000_000
KEY = ("$G", "S")


def hdrs(**kv: str) -> bytes:
    lines = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in kv.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def bh(bid: str, seq: int | str, commit: str | None = None, **kv: str) -> bytes:
    extra = {"Nats_Batch_Commit": commit} if commit is not None else {}
    return hdrs(Nats_Batch_Id=bid, Nats_Batch_Sequence=str(seq), **extra, **kv)


def config(**cfg) -> StreamConfig:
    cfg.setdefault("subjects", ["s.>"])
    cfg.setdefault("allow_atomic", True)
    return StreamConfig(name="S", **cfg).checked()


def code(staging) -> tuple[int, str] | None:
    return (staging.error.err_code, staging.error.description) if staging.error is not None else None


OWNER = object()


def stage(b: AtomicBatches, headers: bytes, data: bytes = b"x", now: int = T0, cfg=None, owner=OWNER, key=KEY):
    return b.stage(key, owner, cfg or config(), "s.a", headers, data, now)


# ---------------------------------------------------------------------- headers and ids

def test_batch_id_is_the_header_and_an_empty_one_is_none():
    assert batch_id(None) == "" and batch_id(b"") == ""
    assert batch_id(hdrs(Nats_Batch_Id="b1")) == "b1"
    assert batch_id(b"NATS/1.0\r\nNats-Batch-Id:\r\n\r\n") == ""
    assert batch_id(hdrs(X_Nats_Batch_Id="no")) == ""


@pytest.mark.parametrize("seq", ["", "one", "-1", "+1", "1.0", " 1x", "18446744073709551616", "9" * 400, "١"])
def test_a_sequence_that_is_not_a_uint64_is_missing(seq):
    b = AtomicBatches()
    headers = b"NATS/1.0\r\nNats-Batch-Id: b\r\nNats-Batch-Sequence: " + seq.encode() + b"\r\n\r\n"
    assert code(stage(b, headers)) == (10175, "atomic publish sequence is missing")
    assert b.inflight() == 0


def test_a_huge_sequence_on_a_new_batch_is_too_large_not_staged():
    b = AtomicBatches()
    assert code(stage(b, bh("b", "18446744073709551615"))) == (10199, "atomic publish batch is too large: 1000")
    assert b.inflight() == 0


def test_ids_up_to_64_bytes_and_counted_in_bytes():
    b = AtomicBatches()
    assert code(stage(b, bh("x" * 65, 1))) == (10179, "atomic publish batch ID is invalid")
    assert code(stage(b, bh("é" * 33, 1))) == (10179, "atomic publish batch ID is invalid")   # 66 bytes
    assert stage(b, bh("x" * 64, 1)) == stage(b, bh("y", 1)) and b.inflight() == 2


def test_disabled_stream_refuses_before_anything_else():
    b = AtomicBatches()
    assert code(stage(b, bh("x" * 99, "bad"), cfg=config(allow_atomic=False))) == (10174, "atomic publish is disabled")


# ---------------------------------------------------------------------- staging

def test_a_batch_commits_with_its_messages_in_order():
    b = AtomicBatches()
    assert stage(b, bh("b", 1)).committed is None and stage(b, bh("b", 2), b"two").committed is None
    done = stage(b, bh("b", 3, "1"), b"three").committed
    assert done.id == "b" and [d for _, _, d in done.msgs] == [b"x", b"two", b"three"]
    assert b.inflight() == 0 and b.staged_bytes == 0


def test_eob_is_not_stored_and_the_last_message_carries_the_commit():
    b = AtomicBatches()
    stage(b, bh("b", 1))
    done = stage(b, bh("b", 2, "eob"), b"ignored").committed
    assert len(done.msgs) == 1
    assert done.msgs[0][1].endswith(b"Nats-Batch-Commit: 1\r\n\r\n")
    assert code(stage(b, bh("c", 1, "eob"))) == (10176, "atomic publish batch is incomplete")
    assert b.inflight() == 0


def test_gaps_repeats_and_bad_commits_abandon_the_batch():
    for second in (bh("b", 3), bh("b", 1), bh("b", 2, "yes"), bh("b", 2, "")):
        b = AtomicBatches()
        stage(b, bh("b", 1))
        assert stage(b, second).error is not None
        assert b.inflight() == 0 and b.staged_bytes == 0
        assert code(stage(b, bh("b", 2, "1"))) == (10176, "atomic publish batch is incomplete")


def test_a_required_api_level_too_high_abandons_and_a_met_one_is_not_stored():
    b = AtomicBatches()
    stage(b, bh("b", 1))
    assert code(stage(b, bh("b", 2, Nats_Required_Api_Level="x"))) == (10185, "JetStream minimum api level required")
    assert b.inflight() == 0
    stage(b, bh("c", 1, Nats_Required_Api_Level="1"))
    done = stage(b, bh("c", 2, "1")).committed
    assert b"Required" not in done.msgs[0][1] and b"Nats-Batch-Id: c" in done.msgs[0][1]


def test_at_most_max_size_messages():
    b = AtomicBatches(max_size=3)
    for i in (1, 2, 3):
        stage(b, bh("b", i))
    assert code(stage(b, bh("b", 4))) == (10199, "atomic publish batch is too large: 3")
    assert b.inflight() == 0
    for i in (1, 2, 3):
        stage(b, bh("c", i))
    assert len(stage(b, bh("c", 4, "eob")).committed.msgs) == 3     # eob not counted


def test_inflight_limits_per_stream_and_per_server():
    b = AtomicBatches(per_stream=2, total=3)
    assert stage(b, bh("a", 1)).error is None and stage(b, bh("b", 1)).error is None
    assert code(stage(b, bh("c", 1))) == (10210, "atomic publish too many inflight")
    assert stage(b, bh("c", 1), key=("$G", "T")).error is None
    assert code(stage(b, bh("d", 1), key=("$G", "U"))) == (10210, "atomic publish too many inflight")
    assert stage(b, bh("a", 2)).error is None       # a staged batch goes on
    assert b.inflight() == 3 and b.inflight(KEY) == 2


def test_idle_batches_are_abandoned_after_the_timeout_and_make_room():
    b = AtomicBatches(per_stream=1, total=1, timeout_ns=10 * SECOND)
    stage(b, bh("a", 1), now=T0)
    stage(b, bh("a", 2), now=T0 + 9 * SECOND)       # activity keeps it
    assert code(stage(b, bh("z", 1), now=T0 + 18 * SECOND, key=("$G", "T"))) == (10210, "atomic publish too many inflight")
    assert stage(b, bh("z", 1), now=T0 + 19 * SECOND, key=("$G", "T")).error is None
    assert b.inflight() == 1 and b.inflight(KEY) == 0
    assert code(stage(b, bh("a", 3, "1"), now=T0 + 19 * SECOND)) == (10176, "atomic publish batch is incomplete")
    assert b.expire(T0 + 100 * SECOND) == 1 and b.inflight() == 0 and b.staged_bytes == 0


def test_a_stream_created_again_has_none_of_the_old_batches():
    b = AtomicBatches()
    stage(b, bh("a", 1), owner=OWNER)
    assert code(stage(b, bh("a", 2, "1"), owner=object())) == (10176, "atomic publish batch is incomplete")
    assert b.inflight() == 0


def test_drop_stream_abandons_its_batches_only():
    b = AtomicBatches()
    stage(b, bh("a", 1))
    stage(b, bh("b", 1))
    stage(b, bh("c", 1), key=("$G", "T"))
    assert b.drop_stream(KEY) == 2 and b.drop_stream(KEY) == 0
    assert b.inflight() == 1 and b.staged_bytes == len("s.a") + len(bh("c", 1)) + 1


def test_staged_bytes_are_bounded_per_batch_and_per_server():
    b = AtomicBatches(max_batch_bytes=1000, max_staged_bytes=1500)
    big = b"x" * 400
    assert stage(b, bh("a", 1), big).error is None and stage(b, bh("a", 2), big).error is None
    assert code(stage(b, bh("a", 3), big)) == (10199, "atomic publish batch is too large: 2")
    assert b.inflight() == 0 and b.staged_bytes == 0
    for bid in ("p", "q", "r"):
        assert stage(b, bh(bid, 1), big).error is None
    assert code(stage(b, bh("s", 1), big)) == (10210, "atomic publish too many inflight")
    assert b.staged_bytes <= 1500 and b.inflight() == 3


def test_many_batches_cost_bounded_memory():
    b = AtomicBatches()
    for k in range(2000):
        stage(b, bh(f"b{k}", 1), key=("$G", f"S{k // 50}"))
    assert b.inflight() == 1000     # the server's limit


# ---------------------------------------------------------------------- the commit's checks

def stream(**cfg) -> Stream:
    return Stream(config(**cfg), MemoryStore())


def checked(s: Stream, *msgs) -> tuple[int, str] | None:
    try:
        check_batch(s, list(msgs), T0)
    except JSApiError as err:
        return err.err_code, err.description
    return None


def m(subject="s.a", data=b"x", **kv):
    return (subject, hdrs(**kv) if kv else None, data)


def test_rollups_only_where_nats_server_allows_them_in_a_batch():
    s = stream(allow_rollup_hdrs=True)
    assert checked(s, m(Nats_Rollup="all"), m("s.b")) is None
    assert checked(s, m(), m("s.b", Nats_Rollup="all")) == (10111, "batch rollup all invalid")
    assert checked(s, m(), m(Nats_Rollup="sub")) == (10111, "batch rollup sub invalid")
    assert checked(s, m(), m("s.b", Nats_Rollup="sub")) is None
    assert checked(s, m(Nats_Rollup="SUB")) == (10111, 'rollup value invalid: "SUB"')
    assert checked(stream(), m(Nats_Rollup="sub")) == (10111, "rollup not permitted")


def test_discard_new_counts_the_whole_batch():
    s = stream(discard="new", max_msgs=3)
    s.publish("s.a", None, b"", T0)
    assert checked(s, m(), m()) is None
    assert checked(s, m(), m(), m()) == (10077, "maximum messages exceeded")
    per = stream(discard="new", max_msgs_per_subject=2, discard_new_per_subject=True)
    assert checked(per, m(), m(), m("s.b")) is None
    assert checked(per, m(), m(), m()) == (10077, "maximum messages per subject exceeded")


def test_ttl_and_expected_stream_and_header_size():
    assert checked(stream(), m(Nats_TTL="1s")) == (10166, "per-message TTL is disabled")
    assert checked(stream(allow_msg_ttl=True), m(Nats_TTL="0")) == (10165, "invalid per-message TTL")
    assert checked(stream(), m(Nats_Expected_Stream="T")) == (10060, "expected stream does not match")
    assert checked(stream(), ("s.a", hdrs(X="y" * 70000), b"")) == (10097, "header size exceeds maximum allowed of 64k")


def test_a_sealed_stream_refuses_the_batch():
    s = stream()
    s.config = config(sealed=True)
    assert checked(s, m()) == (10109, "invalid operation on sealed stream")


# ---------------------------------------------------------------------- storing: the account

class Events:
    def emit(self, name: str, **fields) -> None:
        pass


def account(**kw) -> JetStreamAccount:
    return JetStreamAccount("$G", store_dir=None, sync=GroupCommit(), events=Events(),
                            interest=lambda s: False, server_version="2.15.1", **kw)


def create(acc: JetStreamAccount, **cfg) -> None:
    body = {"name": "S", "subjects": ["s.>"], "storage": "memory", "allow_atomic": True, **cfg}
    out = acc.handle_api("$JS.API.STREAM.CREATE.S", "_INBOX.r", None, json.dumps(body).encode(), T0)
    assert "error" not in json.loads(out[0].out.data)


def publish(acc, headers, data=b"x", subject="s.a", now=T0) -> list:
    return [r.out.data for r in acc.publish_atomic(acc.streams["S"], subject, "_INBOX.p", headers, data, now)]


def test_a_rollup_all_then_an_expected_subject_sequence_stores_the_whole_batch():
    """The subject's last message, checked before the batch, is rolled up by the batch's first
    message: stored whole anyway (checked once, as nats-server)."""
    acc = account()
    create(acc, allow_rollup_hdrs=True)
    acc.publish(acc.streams["S"], "s.b", None, None, b"old", T0)
    assert publish(acc, bh("r", 1, Nats_Rollup="all")) == [b""]
    ack = publish(acc, bh("r", 2, "1", Nats_Expected_Last_Subject_Sequence="1"), subject="s.b")
    assert ack == [b'{"stream":"S","seq":3,"batch":"r","count":2}']
    assert acc.streams["S"].stream.store.state().messages == 2


def test_a_refused_commit_stores_nothing_and_a_no_ack_stream_answers_nothing():
    acc = account()
    create(acc)
    publish(acc, bh("d", 1, Nats_Msg_Id="m"))
    out = publish(acc, bh("d", 2, "1", Nats_Msg_Id="m"))
    assert json.loads(out[0])["error"]["err_code"] == 10201
    assert acc.streams["S"].stream.store.state().messages == 0 and acc.streams["S"].stream.last_seq == 0
    quiet = account()
    create(quiet, no_ack=True)
    assert publish(quiet, bh("q", 1)) == [] and publish(quiet, bh("q", 2, "1")) == []
    assert quiet.streams["S"].stream.store.state().messages == 2


def test_account_limits_refuse_a_batch_message_before_staging():
    acc = account(limits={"max_memory": 100})
    create(acc, max_bytes=100)
    out = publish(acc, bh("a", 1), b"x" * 200)
    assert json.loads(out[0])["error"]["err_code"] == 10002
    assert acc.batches.inflight() == 0


# ---------------------------------------------------------------------- the "B" entry

def test_a_batch_entry_round_trips_and_old_entries_still_decode():
    msgs = [["s.a", None, b"1"], ["s.b", hdrs(A="b"), b"2"]]
    item = decode_entry(encode_entry(BATCH, T0, set(), "b1", "_INBOX.x", msgs))
    assert item[3] == "b1" and item[4] == "_INBOX.x" and item[5] == [("s.a", None, b"1"), ("s.b", hdrs(A="b"), b"2")]
    assert decode_entry(encode_entry(PUBLISH, T0, set(), "s.a", None, None, b""))[0] == PUBLISH


@pytest.mark.parametrize("fields", [
    ["", None, [["s.a", None, b""]]],                       # no id
    ["b", None, []],                                        # no message
    ["b", None, [["s.a", None, b""]] * 1001],               # too many
    ["b", None, [["s a", None, b""]]],                      # a subject with a space
    ["b", None, [["s.a", "text", b""]]],                    # headers not bytes
    ["b", None, [["s.a", None]]],                           # short message
    ["b", None, "s.a"],                                     # not a list
    ["b", 7, [["s.a", None, b""]]],                         # reply not a string
    ["b", "bad reply", [["s.a", None, b""]]],
    ["b", None, [["s.a", None, b""]], "extra"],
])
def test_hostile_batch_entries_are_refused(fields):
    with pytest.raises(EntryError):
        decode_entry(msgpack.packb([BATCH, T0, [], *fields], use_bin_type=True))


def _replica(name: str, sent: list) -> StreamReplica:
    override = InterestOverride()
    acc = JetStreamAccount("$G", store_dir=None, sync=GroupCommit(), events=Events(),
                           interest=lambda s: False, server_version="2.15.1", clustered=True)
    acc.create_replica({"name": "S", "subjects": ["s.>"], "storage": "memory", "num_replicas": 3,
                        "allow_atomic": True}, T0)
    return StreamReplica(acc, "S", emit=sent.extend, override=override)


def test_replicas_apply_a_batch_entry_whole_or_not_at_all():
    sent: dict[str, list] = {n: [] for n in ("n1", "n2", "n3")}
    reps = {n: _replica(n, sent[n]) for n in sent}
    reps["n1"].leader_changed("n1", 1)
    reps["n1"].is_leader = True
    good = encode_entry(BATCH, T0, set(), "g", "_INBOX.a", [["s.a", hdrs(Nats_Msg_Id="1"), b"1"], ["s.b", None, b"2"]])
    bad = encode_entry(BATCH, T0 + 1, set(), "h", "_INBOX.b",
                       [["s.c", hdrs(Nats_Msg_Id="2"), b"3"], ["s.d", hdrs(Nats_Msg_Id="1"), b"4"]])
    for r in reps.values():
        r.apply([Entry(1, 1, EntryType.NORMAL, good), Entry(1, 2, EntryType.NORMAL, bad)])
    for n, r in reps.items():
        st = r.account.streams["S"].stream.store.state()
        assert (st.messages, st.last_seq) == (2, 2), n
    assert [r.out.data for r in sent["n1"]] == [
        b'{"stream":"S","seq":2,"batch":"g","count":2}',
        json.dumps({"error": {"code": 400, "err_code": 10201,
                              "description": "atomic publish batch contains duplicate message id"},
                    "stream": "S", "seq": 0}, separators=(",", ":")).encode()]
    assert sent["n2"] == [] and sent["n3"] == []


# ---------------------------------------------------------------------- abandoned: reasons and timers

def test_the_abandonments_nats_server_advises_name_their_reason():
    b = AtomicBatches(max_size=2)
    stage(b, bh("gap", 1))
    assert stage(b, bh("gap", 3)).abandoned == "incomplete"
    assert stage(b, bh("eob", 1, "eob")).abandoned == "incomplete"
    assert stage(b, bh("lvl", 1, Nats_Required_Api_Level="99")).abandoned == "unsupported"
    for i in (1, 2):
        stage(b, bh("big", i))
    got = stage(b, bh("big", 3))
    assert code(got) == (10199, "atomic publish batch is too large: 2") and got.abandoned == "large"
    small = AtomicBatches(max_batch_bytes=100)
    stage(small, bh("bytes", 1))
    assert stage(small, bh("bytes", 2), b"x" * 100).abandoned == "large"     # jetraft's byte bound
    # not advised (nats-server neither): a bad commit, a batch not staged, a new one too large
    stage(b, bh("bad", 1))
    assert stage(b, bh("bad", 2, "yes")).abandoned is None
    assert stage(b, bh("absent", 2)).abandoned is None
    assert stage(b, bh("absent", 9)).abandoned is None
    assert b.inflight() == 0 and b.take_abandoned() == []


def test_the_server_wide_byte_bound_abandons_as_incomplete():
    b = AtomicBatches(max_staged_bytes=150)
    assert stage(b, bh("a", 1), b"x" * 50).error is None
    got = stage(b, bh("b", 1), b"x" * 100)
    assert code(got) == (10210, "atomic publish too many inflight") and got.abandoned == "incomplete"


def test_the_next_expiry_is_the_least_recently_touched_batch_and_expiry_is_oldest_first():
    b = AtomicBatches(timeout_ns=10 * SECOND)
    assert b.next_expiry() is None
    stage(b, bh("a", 1), now=T0)
    stage(b, bh("b", 1), now=T0 + 1 * SECOND, key=("$G", "T"))
    assert b.next_expiry() == T0 + 10 * SECOND
    stage(b, bh("a", 2), now=T0 + 2 * SECOND)              # activity moves it to the back
    assert b.next_expiry() == T0 + 11 * SECOND
    assert b.expire(T0 + 11 * SECOND - 1) == 0
    assert b.expire(T0 + 11 * SECOND) == 1
    assert b.next_expiry() == 0                              # waiting for its advisory
    (gone,) = b.take_abandoned()
    assert (gone.key, gone.id, gone.owner, gone.reason) == (("$G", "T"), "b", OWNER, "timeout")
    assert b.next_expiry() == T0 + 12 * SECOND
    assert code(stage(b, bh("b", 2, "1"), now=T0 + 11 * SECOND, key=("$G", "T"))) == \
        (10176, "atomic publish batch is incomplete")
    assert b.take_abandoned() == []                          # the message of a gone batch: no advisory


def test_expiry_is_bounded_per_call_and_a_commit_or_drop_leaves_the_order():
    b = AtomicBatches(timeout_ns=SECOND)
    for k in range(10):
        stage(b, bh(f"b{k}", 1), now=T0 + k)
    stage(b, bh("b0", 2, "1"), now=T0 + 10)                 # committed: not timed out later
    b.drop_stream(("$G", "T"))
    assert b.expire(T0 + 2 * SECOND, 4) == 4 and b.inflight() == 5
    assert [g.id for g in b.take_abandoned(3)] == ["b1", "b2", "b3"]
    assert b.next_expiry() == 0
    assert b.expire(T0 + 2 * SECOND) == 5 and b.inflight() == 0 and b.staged_bytes == 0
    assert [g.id for g in b.take_abandoned()] == ["b4", "b5", "b6", "b7", "b8", "b9"]
    assert b.next_expiry() is None


def test_a_batch_that_timed_out_is_found_when_its_stream_is_next_staged_and_advised_later():
    b = AtomicBatches(timeout_ns=10 * SECOND)
    stage(b, bh("a", 1), now=T0)
    stage(b, bh("old", 1), now=T0, owner=object(), key=("$G", "T"))
    assert code(stage(b, bh("a", 2), now=T0 + 10 * SECOND)) == (10176, "atomic publish batch is incomplete")
    assert [(g.id, g.reason) for g in b.take_abandoned()] == [("a", "timeout")]
    # a batch of a stream created again is dropped without one
    assert stage(b, bh("new", 1), now=T0 + 5 * SECOND, key=("$G", "T")).error is None
    assert b.inflight(("$G", "T")) == 1 and b.take_abandoned() == []


def test_timed_out_batches_waiting_for_advisories_are_bounded():
    b = AtomicBatches(total=3, per_stream=3, timeout_ns=SECOND)
    for round_ in range(3):
        for k in range(3):
            stage(b, bh(f"r{round_}k{k}", 1), now=T0 + round_ * 2 * SECOND)
        b.expire(T0 + (round_ * 2 + 1) * SECOND)
    assert [g.id for g in b.take_abandoned()] == ["r2k0", "r2k1", "r2k2"]


# ---------------------------------------------------------------------- abandoned: the advisories

class Recorder(Events):
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def emit(self, name: str, **fields) -> None:
        self.lines.append((name, fields))


def listening_account(name: str = "APP", *, domain: str = "", app=True, system=True, **kw) -> JetStreamAccount:
    return JetStreamAccount(name, store_dir=None, sync=GroupCommit(), events=Recorder(),
                            interest=lambda s: False, server_version="2.15.1", domain=domain,
                            advisory_interest=lambda s: app, system_account="$SYS",
                            system_interest=lambda s: system, **kw)


def advisories(replies) -> list[tuple[str | None, str, dict]]:
    return [(r.account, r.out.subject, json.loads(r.out.data)) for r in replies
            if r.out.subject.startswith("$JS.EVENT.")]


def test_an_abandoning_message_advises_in_the_account_and_the_system_account_first():
    acc = listening_account(domain="hub")
    create(acc)
    publish(acc, bh("g", 1))
    out = acc.publish_atomic(acc.streams["S"], "s.a", "_INBOX.p", bh("g", 3), b"x", T0)
    (a_acc, a_subj, mine), (s_acc, s_subj, sys_copy) = advisories(out)
    assert a_acc is None and s_acc == "$SYS"
    assert a_subj == s_subj == "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.S"
    assert list(mine) == ["type", "id", "timestamp", "stream", "domain", "batch", "reason"]
    assert list(sys_copy) == ["type", "id", "timestamp", "account", "stream", "domain", "batch", "reason"]
    assert {k: v for k, v in sys_copy.items() if k not in ("id", "timestamp")} == {
        "type": "io.nats.jetstream.advisory.v1.stream_batch_abandoned", "account": "APP", "stream": "S",
        "domain": "hub", "batch": "g", "reason": "incomplete"}
    assert json.loads(out[-1].out.data)["error"]["err_code"] == 10176     # the refusal after them


def test_advisories_only_where_someone_listens_and_never_twice_in_the_system_account():
    quiet = listening_account(app=False, system=False)
    create(quiet)
    publish(quiet, bh("g", 1))
    assert advisories(quiet.publish_atomic(quiet.streams["S"], "s.a", None, bh("g", 3), b"x", T0)) == []
    sys_acc = listening_account("$SYS")
    create(sys_acc)
    publish(sys_acc, bh("g", 1))
    got = advisories(sys_acc.publish_atomic(sys_acc.streams["S"], "s.a", None, bh("g", 3), b"x", T0))
    assert [(a, body["account"]) for a, _, body in got] == [("$SYS", "$SYS")]


def test_an_advisory_that_fails_is_reported_and_the_refusal_still_answered():
    def broken(subject: str) -> bool:
        raise RuntimeError("boom")
    acc = listening_account(system=False)
    acc.advisory_interest = lambda s: True
    acc.system_interest = broken
    create(acc)
    publish(acc, bh("g", 1))
    out = acc.publish_atomic(acc.streams["S"], "s.a", "_INBOX.p", bh("g", 3), b"x", T0)
    assert len(advisories(out)) == 1 and json.loads(out[-1].out.data)["error"]["err_code"] == 10176
    assert [n for n, _ in acc.events.lines if n == "advisory_failed"] == ["advisory_failed"]


def test_timed_out_batches_are_advised_by_their_account_unless_their_stream_went():
    from jetraft.jetstream.api.batches import timed_out_advisories
    shared = AtomicBatches()
    app, other = listening_account(batches=shared), listening_account("OTHER", batches=shared)
    for acc in (app, other):
        create(acc)
    publish(app, bh("a", 1), now=T0)
    publish(other, bh("o", 1), now=T0 + 1)
    app.handle_api("$JS.API.STREAM.CREATE.D", "_INBOX.r", None, json.dumps(
        {"name": "D", "subjects": ["d.>"], "storage": "memory", "allow_atomic": True}).encode(), T0)
    app.publish_atomic(app.streams["D"], "d.x", None, bh("d", 1), b"", T0 + 2)
    app.handle_api("$JS.API.STREAM.DELETE.D", "_INBOX.r", None, b"", T0 + 3)
    assert shared.next_expiry() == T0 + 10 * SECOND
    assert timed_out_advisories(shared, {"APP": app, "OTHER": other}, T0 + 10 * SECOND - 1) == []
    got = timed_out_advisories(shared, {"APP": app, "OTHER": other}, T0 + 11 * SECOND)
    assert [(name, r.account, json.loads(r.out.data).get("account"), json.loads(r.out.data)["batch"],
             json.loads(r.out.data)["reason"]) for name, r in got] == [
        ("APP", None, None, "a", "timeout"), ("APP", "$SYS", "APP", "a", "timeout"),
        ("OTHER", None, None, "o", "timeout"), ("OTHER", "$SYS", "OTHER", "o", "timeout")]
    assert shared.inflight() == 0 and shared.next_expiry() is None


# ---------------------------------------------------------------------- abandoned: on a stream's leader

def test_a_cluster_leader_advises_a_timed_out_batch_on_its_own_tick_and_a_leader_change_drops_silently():
    from controller_world import World
    from jetraft.jetstream.cluster import Send
    w = World()
    acc = w.accounts["$G"]
    acc.advisory_interest = lambda s: True
    key = w.assign("S", subjects=("s.>",), leader="n1", allow_atomic=True)
    w.take_replies()

    def sends(now: int) -> list[tuple[str, dict]]:
        return [(a.account, json.loads(a.out.data)) for a in w.c.tick(now, now)
                if type(a) is Send and a.out.subject.startswith("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.")]

    w.request("s.a", b"", reply="_INBOX.p", headers=bh("kept", 1), now=T0)
    assert w.take_replies() == [("_INBOX.p", b"")] and acc.batches.inflight(key) == 1
    assert sends(T0 + 10 * SECOND - 1) == []
    ((account, body),) = sends(T0 + 10 * SECOND)
    assert account == "$G" and (body["stream"], body["batch"], body["reason"]) == ("S", "kept", "timeout")
    assert group_of_proposals(w, key) == []                 # the leader's own timer, not a replicated tick
    # a leader change drops a staged batch without an advisory, then or later
    w.request("s.a", b"", reply="_INBOX.p", headers=bh("moved", 1), now=T0 + 20 * SECOND)
    w.elect(key, "n2", now=T0 + 21 * SECOND, term=2)
    assert acc.batches.inflight() == 0
    assert sends(T0 + 60 * SECOND) == []


def group_of_proposals(w, key) -> list[bytes]:
    return list(w.groups[key].proposals)
