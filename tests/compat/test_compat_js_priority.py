"""Priority groups of pull consumers (ADR-42, API level 1), side by side on jetraft and
nats-server 2.15.1: ``priority_policy`` ``overflow`` (``min_pending``/``min_ack_pending``),
``pinned_client`` (the ``Nats-Pin-Id`` header, 423 for another id, ``priority_timeout``,
``$JS.API.CONSUMER.UNPIN``, the PINNED/UNPINNED advisories, CONSUMER.INFO's
``priority_groups``) and ``prioritized`` (``priority`` 0-9, lower first); the config
refusals of checkConsumerCfg and the pull request refusals of processNextMsgRequest; on
three servers, the pin across a consumer leader step-down and a SIGKILL of its leader (it
is the leader's alone in nats-server: a new leader starts without one).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from compat_support import run
from js_support import NS, asked_again, js_session
from nats.errors import TimeoutError as NatsTimeoutError
from polling import apoll

ZERO = "0001-01-01T00:00:00Z"
UNPIN = "io.nats.jetstream.api.v1.consumer_unpin_response"
PINNED = "io.nats.jetstream.advisory.v1.consumer_group_pinned"
UNPINNED = "io.nats.jetstream.advisory.v1.consumer_group_unpinned"


class Inbox:
    """A subscription on a fresh inbox whose messages are queued as they come."""

    def __init__(self, s, subject: str) -> None:
        self.s, self.subject = s, subject
        self.queue: asyncio.Queue = asyncio.Queue()

    async def start(self) -> Inbox:
        await self.s.nc.subscribe(self.subject, cb=self.queue.put)
        return self

    async def pull(self, consumer: str, body: dict | bytes, stream: str = "S") -> None:
        """Send a pull request for ``consumer`` with this inbox as its reply subject."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        await self.s.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", raw, reply=self.subject)
        await self.s.nc.flush()

    async def next(self, timeout: float = 5.0):
        return await asyncio.wait_for(self.queue.get(), timeout)


def status(msg) -> tuple[str | None, str | None]:
    headers = msg.headers or {}
    return headers.get("Status"), headers.get("Description")


def pending_headers(msg) -> tuple[str | None, str | None]:
    headers = msg.headers or {}
    return headers.get("Nats-Pending-Messages"), headers.get("Nats-Pending-Bytes")


async def collect(s, subject: str) -> list[tuple[str, dict]]:
    """The pinned and unpinned advisories on ``subject`` (a wildcard) from now on, in order."""
    found: list[tuple[str, dict]] = []

    async def take(msg) -> None:
        body = json.loads(msg.data)
        if body.get("type") in (PINNED, UNPINNED):
            found.append((msg.subject, body))
    await s.nc.subscribe(subject, cb=take)
    await s.nc.flush()
    return found


async def consumer(s, name: str, stream: str = "S", **config) -> dict:
    body = {"stream_name": stream, "config": {"durable_name": name, "ack_policy": "explicit", **config}}
    return await s.api(f"$JS.API.CONSUMER.CREATE.{stream}.{name}", body)


def pull(group: str = "A", batch: int = 1, expires: float = 5.0, **fields) -> dict:
    return {"batch": batch, "expires": int(expires * NS), "group": group, **fields}


# --- configuration ----------------------------------------------------------------------

BAD_CONFIGS = [
    pytest.param({"priority_policy": "pinned_client"}, (400, 10159), id="pinned-without-groups"),
    pytest.param({"priority_policy": "overflow", "priority_groups": []}, (400, 10159), id="overflow-empty-groups"),
    pytest.param({"priority_policy": "prioritized", "priority_groups": [""]}, (400, 10161), id="empty-group-name"),
    pytest.param({"priority_policy": "overflow", "priority_groups": ["a b"]}, (400, 10162), id="group-with-space"),
    pytest.param({"priority_policy": "overflow", "priority_groups": ["A", "x" * 17]}, (400, 10162),
                 id="group-too-long"),
    pytest.param({"priority_policy": "overflow", "priority_groups": ["A\r\n"]}, (400, 10162), id="group-with-crlf"),
    pytest.param({"priority_policy": "overflow", "priority_groups": ["A\n"]}, (400, 10162), id="group-with-newline"),
    pytest.param({"priority_policy": "overflow", "priority_groups": ["A"], "deliver_subject": "dl"},
                 (400, 10178), id="push-consumer"),
    pytest.param({"priority_groups": ["A"]}, (400, 10196), id="groups-with-policy-none"),
    pytest.param({"priority_policy": "none", "priority_timeout": NS}, (400, 10197), id="timeout-with-policy-none"),
    pytest.param({"priority_policy": "bogus", "priority_groups": ["A"]}, (400, 10025), id="unknown-policy"),
    pytest.param({"priority_policy": 1, "priority_groups": ["A"]}, (400, 10025), id="policy-not-a-string"),
    pytest.param({"priority_policy": "overflow", "priority_groups": "A"}, (400, 10025), id="groups-not-a-list"),
    pytest.param({"priority_policy": "overflow", "priority_groups": [1]}, (400, 10025), id="group-not-a-string"),
    pytest.param({"priority_policy": "pinned_client", "priority_groups": ["A"], "priority_timeout": "1s"},
                 (400, 10025), id="timeout-not-a-number"),
]


@pytest.mark.parametrize(("config", "error"), BAD_CONFIGS)
def test_a_bad_priority_config_is_refused_as_nats_server_refuses_it(js_server, config, error):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            reply = await consumer(s, "C", **config)
            assert (reply["error"]["code"], reply["error"]["err_code"]) == error, reply
            names = await s.api("$JS.API.CONSUMER.NAMES.S")
            assert names["consumers"] == [], names
            return reply["error"]["description"]
    description = run(scenario)
    assert description


def test_priority_configs_are_stored_with_nats_server_defaults(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            pinned = await consumer(s, "P", priority_policy="pinned_client", priority_groups=["A", "g/1=x_-"])
            cfg = pinned["config"]
            assert (cfg["priority_policy"], cfg["priority_groups"], cfg["priority_timeout"]) == (
                "pinned_client", ["A", "g/1=x_-"], 120 * NS), cfg
            assert pinned["priority_groups"] == [{"group": "A", "pinned_ts": ZERO}], pinned
            assert pinned["config"]["metadata"]["_nats.req.level"] == "1"    # API level 1
            negative = await consumer(s, "N", priority_policy="pinned_client", priority_groups=["A"],
                                      priority_timeout=-5)
            assert negative["config"]["priority_timeout"] == 120 * NS, negative
            pedantic = await s.api("$JS.API.CONSUMER.CREATE.S.Q", {"stream_name": "S", "pedantic": True, "config": {
                "durable_name": "Q", "ack_policy": "explicit", "priority_policy": "pinned_client",
                "priority_groups": ["A"], "priority_timeout": -5}})
            assert pedantic["error"]["err_code"] == 10157, pedantic
            over = await consumer(s, "O", priority_policy="overflow", priority_groups=["A"], priority_timeout=3 * NS)
            assert over["config"]["priority_timeout"] == 3 * NS and over["config"]["priority_policy"] == "overflow"
            prio = await consumer(s, "R", priority_policy="prioritized", priority_groups=["B"])
            assert "priority_timeout" not in prio["config"], prio
            assert prio["priority_groups"] == [{"group": "B", "pinned_ts": ZERO}]
            plain = await consumer(s, "D")
            assert "priority_groups" not in plain and "priority_policy" not in plain["config"], plain
            listed = await s.api("$JS.API.CONSUMER.LIST.S")
            groups = {c["name"]: c.get("priority_groups") for c in listed["consumers"]}
            assert groups == {"P": [{"group": "A", "pinned_ts": ZERO}], "N": [{"group": "A", "pinned_ts": ZERO}],
                              "O": [{"group": "A", "pinned_ts": ZERO}], "R": [{"group": "B", "pinned_ts": ZERO}],
                              "D": None}, groups
            # policy, groups and timeout may be changed by an update (nats-server checkNewConsumerConfig)
            updated = await s.api("$JS.API.CONSUMER.CREATE.S.O", {"stream_name": "S", "action": "update", "config": {
                "durable_name": "O", "ack_policy": "explicit", "priority_policy": "prioritized",
                "priority_groups": ["Z"]}})
            assert updated["config"]["priority_policy"] == "prioritized", updated
            assert updated["priority_groups"] == [{"group": "Z", "pinned_ts": ZERO}]
    run(scenario)


# --- pull requests ------------------------------------------------------------------------

BAD_PULLS = [
    ("P", pull(group=""), ("400", "Bad Request - Priority Group missing")),
    ("P", {"batch": 1}, ("400", "Bad Request - Priority Group missing")),
    ("P", pull(group="Z"), ("400", "Bad Request - Invalid Priority Group")),
    ("P", pull(min_pending=1), ("400", "Bad Request - Not a Overflow Priority consumer")),
    ("P", pull(min_ack_pending=-1), ("400", "Bad Request - Not a Overflow Priority consumer")),
    ("P", pull(priority=10), ("400", "Bad Request - Priority must be between 0 and 9")),
    ("P", pull(priority=-1), ("400", "Bad Request - Priority must be between 0 and 9")),
    ("O", pull(id="X"), ("400", "Bad Request - Not a Pinned Client Priority consumer")),
    ("O", pull(group="B"), ("400", "Bad Request - Invalid Priority Group")),
    ("R", pull(priority=99), ("400", "Bad Request - Priority must be between 0 and 9")),
    ("D", pull(min_pending=1), ("400", "Bad Request - Not a Overflow Priority consumer")),
    ("D", pull(id="X"), ("400", "Bad Request - Not a Pinned Client Priority consumer")),
    ("D", pull(priority=10), ("400", "Bad Request - Priority must be between 0 and 9")),
    ("P", pull(priority="1"),
     ("400", "Bad Request - json: cannot unmarshal string into Go struct field .priority of type int")),
    ("P", pull(group=5), ("400", "Bad Request - json: cannot unmarshal number into Go struct field .group of type string")),
    ("O", pull(min_pending=1.5),
     ("400", "Bad Request - json: cannot unmarshal number 1.5 into Go struct field .min_pending of type int64")),
    ("O", pull(min_ack_pending=[1]),
     ("400", "Bad Request - json: cannot unmarshal array into Go struct field .min_ack_pending of type int64")),
    ("P", pull(id=True), ("400", "Bad Request - json: cannot unmarshal bool into Go struct field .id of type string")),
]


def test_a_bad_pull_request_is_answered_as_nats_server_answers_it_and_never_served(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            await consumer(s, "P", priority_policy="pinned_client", priority_groups=["A"])
            await consumer(s, "O", priority_policy="overflow", priority_groups=["A"])
            await consumer(s, "R", priority_policy="prioritized", priority_groups=["A"])
            await consumer(s, "D")
            await s.js.publish("s.1", b"one")
            for k, (name, body, expected) in enumerate(BAD_PULLS):
                inbox = await Inbox(s, f"bad.{k}").start()
                await inbox.pull(name, body)
                msg = await inbox.next()
                assert status(msg) == expected, (name, body, msg.headers)
            for name in ("P", "O", "R", "D"):
                info = await s.api(f"$JS.API.CONSUMER.INFO.S.{name}")
                # nothing was queued nor served
                assert (info["num_waiting"], info["num_ack_pending"], info["num_pending"]) == (0, 0, 1), info
            # a group on a consumer without a policy is not looked at (nats-server ignores it)
            inbox = await Inbox(s, "plain.D").start()
            await inbox.pull("D", pull(group="whatever"))
            msg = await inbox.next()
            assert msg.data == b"one" and status(msg) == (None, None)
    run(scenario)


# --- overflow -----------------------------------------------------------------------------

def test_overflow_serves_a_request_only_once_its_threshold_is_reached(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            await consumer(s, "O", priority_policy="overflow", priority_groups=["A"])
            for k in range(3):
                await s.js.publish("s.1", f"m{k}".encode())
            # three pending, none awaiting an ack: neither threshold is reached
            high = await Inbox(s, "high").start()
            await high.pull("O", pull(min_pending=10, expires=0.5))
            acks = await Inbox(s, "acks").start()
            await acks.pull("O", pull(min_ack_pending=1, expires=0.5))
            got = [status(await high.next()), status(await acks.next())]
            assert got == [("408", "Request Timeout")] * 2, got
            # min_pending counts the message being delivered: 3 pending reaches 3
            three = await Inbox(s, "three").start()
            await three.pull("O", pull(min_pending=3))
            assert (await three.next()).data == b"m0"
            # one message awaits its ack now
            one = await Inbox(s, "one").start()
            await one.pull("O", pull(min_ack_pending=1))
            assert (await one.next()).data == b"m1"
            # either threshold is enough
            either = await Inbox(s, "either").start()
            await either.pull("O", pull(min_pending=100, min_ack_pending=2))
            assert (await either.next()).data == b"m2"
            # a request that waits is served once enough messages come
            waits = await Inbox(s, "waits").start()
            await waits.pull("O", pull(min_pending=5, expires=10))
            plain = await Inbox(s, "plain").start()
            await s.js.publish("s.1", b"m3")
            await plain.pull("O", pull())
            assert (await plain.next()).data == b"m3"      # served first: no threshold
            for k in range(4, 9):
                await s.js.publish("s.1", f"m{k}".encode())
            msg = await waits.next()
            assert msg.data == b"m4" and status(msg) == (None, None)
            info = await s.api("$JS.API.CONSUMER.INFO.S.O")
            assert (info["num_ack_pending"], info["num_pending"], info["num_waiting"]) == (5, 4, 0), info
            assert info["priority_groups"] == [{"group": "A", "pinned_ts": ZERO}]
    run(scenario)


# --- pinned client ------------------------------------------------------------------------

def test_a_pinned_client_gets_every_message_until_unpinned(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            created = await consumer(s, "P", priority_policy="pinned_client", priority_groups=["A"])
            assert "error" not in created, created
            advisories = await collect(s, "$JS.EVENT.ADVISORY.CONSUMER.*.S.P")
            await s.js.publish("s.1", b"m0")
            await s.nc.publish("s.2", b"m1", headers={"Some": "value"})
            await s.js.publish("s.3", b"m2")
            one = await Inbox(s, "one").start()
            await one.pull("P", pull(batch=10, expires=30))
            msgs = [await one.next() for _ in range(3)]
            assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
            pin = msgs[0].headers["Nats-Pin-Id"]
            assert len(pin) == 22 and pin.isalnum(), pin
            assert [m.headers["Nats-Pin-Id"] for m in msgs] == [pin] * 3
            assert msgs[1].headers["Some"] == "value"
            info = await s.api("$JS.API.CONSUMER.INFO.S.P")
            (group,) = info["priority_groups"]
            assert group["group"] == "A" and group["pinned_client_id"] == pin and group["pinned_ts"] != ZERO
            # another client without the pin id waits; one with another id is refused
            two = await Inbox(s, "two").start()
            await two.pull("P", pull(expires=30))
            wrong = await Inbox(s, "wrong").start()
            await wrong.pull("P", pull(id="WRONG"))
            assert status(await wrong.next()) == ("423", "Nats-Pin-Id mismatch")
            await s.js.publish("s.1", b"m3")
            m3 = await one.next()
            assert m3.data == b"m3" and m3.headers["Nats-Pin-Id"] == pin
            # a request carrying the pin is served like the pinned one
            again = await Inbox(s, "again").start()
            await again.pull("P", pull(id=pin, expires=30))

            async def three_waiting():
                return (await s.api("$JS.API.CONSUMER.INFO.S.P"))["num_waiting"] == 3
            await apoll(three_waiting, "three requests waiting")
            unpinned = await s.api("$JS.API.CONSUMER.UNPIN.S.P", {"group": "A"})
            assert unpinned == {"type": UNPIN}, unpinned
            info = await s.api("$JS.API.CONSUMER.INFO.S.P")
            assert info["priority_groups"] == [{"group": "A", "pinned_ts": ZERO}], info
            # the next message pins the first waiting request without an id; the old pin's
            # requests are told so when a message comes for them
            await s.js.publish("s.1", b"m4")
            m4 = await two.next()
            new_pin = m4.headers["Nats-Pin-Id"]
            assert m4.data == b"m4" and new_pin != pin and len(new_pin) == 22
            await s.js.publish("s.1", b"m5")
            refused = [await one.next(), await again.next()]
            assert [status(m) for m in refused] == [("423", "Nats-Wrong-Pin-Id")] * 2
            assert [pending_headers(m) for m in refused] == [("6", "0"), ("1", "0")]
            info = await s.api("$JS.API.CONSUMER.INFO.S.P")
            assert (info["num_waiting"], info["num_pending"]) == (0, 1), info
            assert info["priority_groups"][0]["pinned_client_id"] == new_pin
            await apoll(lambda: len(advisories) >= 3, "pinned, unpinned, pinned")
            summary = [(subject, a["type"], a.get("group"), a.get("pinned_id"), a.get("reason"), a.get("account"),
                        a["stream"], a["consumer"]) for subject, a in advisories]
            assert summary == [
                ("$JS.EVENT.ADVISORY.CONSUMER.PINNED.S.P", PINNED, "A", pin, None, "$G", "S", "P"),
                ("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.S.P", UNPINNED, "A", None, "admin", "$G", "S", "P"),
                ("$JS.EVENT.ADVISORY.CONSUMER.PINNED.S.P", PINNED, "A", new_pin, None, "$G", "S", "P"),
            ], summary
    run(scenario)


def test_a_pin_not_renewed_within_priority_timeout_passes_to_a_waiting_client(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            await consumer(s, "P", priority_policy="pinned_client", priority_groups=["A"], priority_timeout=NS)
            advisories = await collect(s, "$JS.EVENT.ADVISORY.CONSUMER.*.S.P")
            await s.js.publish("s.1", b"m0")
            one = await Inbox(s, "one").start()
            await one.pull("P", pull(expires=30))
            first = await one.next()
            pin = first.headers["Nats-Pin-Id"]
            two = await Inbox(s, "two").start()
            await two.pull("P", pull(expires=30))
            started = time.monotonic()
            await s.js.publish("s.1", b"m1")
            m1 = await two.next(timeout=15)
            waited = time.monotonic() - started
            new_pin = m1.headers["Nats-Pin-Id"]
            assert m1.data == b"m1" and new_pin not in ("", pin)
            assert waited > 0.3, waited     # held until the pin's second ran out
            await apoll(lambda: len(advisories) >= 3, "pinned, unpinned, pinned")
            assert [(a["type"], a.get("pinned_id"), a.get("reason")) for _s, a in advisories[:3]] == [
                (PINNED, pin, None), (UNPINNED, None, "timeout"), (PINNED, new_pin, None)]
            # a plain request (a batch size, no priority fields) waits while a pin is held
            plain = await Inbox(s, "plain").start()
            await plain.pull("P", b"1")
            await s.js.publish("s.1", b"m2")
            m2 = await plain.next(timeout=15)
            # ... and after the pin ran out, it is served with an empty pin id, pinning nobody
            assert m2.data == b"m2" and m2.headers["Nats-Pin-Id"] == ""
            info = await s.api("$JS.API.CONSUMER.INFO.S.P")
            assert info["priority_groups"] == [{"group": "A", "pinned_ts": ZERO}], info
            await apoll(lambda: len(advisories) >= 4, "the second pin's end")
            assert [(a["type"], a.get("reason")) for _s, a in advisories[3:]] == [(UNPINNED, "timeout")]
    run(scenario)


def test_unpin_refusals_are_nats_servers(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            await consumer(s, "P", priority_policy="pinned_client", priority_groups=["A"])
            await consumer(s, "O", priority_policy="overflow", priority_groups=["B"])
            await consumer(s, "D")
            advisories = await collect(s, "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.>")
            answers = {}
            for label, subject, raw in [
                ("empty", "S.P", b""), ("no-group", "S.P", b"{}"), ("empty-group", "S.P", b'{"group":""}'),
                ("null", "S.P", b"null"), ("array", "S.P", b"[]"), ("number-group", "S.P", b'{"group":5}'),
                ("bad-json", "S.P", b"{"), ("trailing", "S.P", b'{"group":"A"} x'),
                ("bad-name", "S.P", b'{"group":"a b"}'), ("unknown-group", "S.P", b'{"group":"B"}'),
                ("no-stream", "X.P", b'{"group":"A"}'), ("no-consumer", "S.X", b'{"group":"A"}'),
                ("no-stream-bad-json", "X.P", b"x"), ("no-policy", "S.D", b'{"group":"A"}'),
                ("overflow", "S.O", b'{"group":"B"}'), ("ok", "S.P", b'{"group":"A"}'),
            ]:
                reply = await s.api(f"$JS.API.CONSUMER.UNPIN.{subject}", raw=raw)
                assert reply["type"] == UNPIN, reply
                answers[label] = reply.get("error")
            assert answers == {
                "empty": {"code": 400, "err_code": 10025, "description": "invalid JSON: unexpected end of JSON input"},
                "no-group": {"code": 400, "err_code": 10025, "description": "invalid JSON: consumer group not specified"},
                "empty-group": {"code": 400, "err_code": 10025,
                                "description": "invalid JSON: consumer group not specified"},
                "null": {"code": 400, "err_code": 10025, "description": "invalid JSON: consumer group not specified"},
                "array": {"code": 400, "err_code": 10025, "description": "invalid JSON: json: cannot unmarshal array "
                          "into Go value of type server.JSApiConsumerUnpinRequest"},
                "number-group": {"code": 400, "err_code": 10025, "description": "invalid JSON: json: cannot unmarshal "
                                 "number into Go struct field JSApiConsumerUnpinRequest.group of type string"},
                "bad-json": {"code": 400, "err_code": 10025, "description": "invalid JSON: unexpected end of JSON input"},
                "trailing": {"code": 400, "err_code": 10025,
                             "description": "invalid JSON: invalid character 'x' after top-level value"},
                "bad-name": {"code": 400, "err_code": 10162, "description": "Valid priority group name must match "
                             "A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters"},
                "unknown-group": {"code": 400, "err_code": 10160,
                                  "description": "Provided priority group does not exist for this consumer"},
                "no-stream": {"code": 404, "err_code": 10059, "description": "stream not found"},
                "no-consumer": {"code": 404, "err_code": 10014, "description": "consumer not found"},
                "no-stream-bad-json": {"code": 400, "err_code": 10025,
                                       "description": "invalid JSON: invalid character 'x' looking for beginning of value"},
                "no-policy": {"code": 400, "err_code": 10160,
                              "description": "Provided priority group does not exist for this consumer"},
                "overflow": None, "ok": None,
            }, answers
            # an unpin is advised whatever the policy, pinned or not
            await apoll(lambda: len(advisories) >= 2, "two unpinned advisories")
            assert [(subj, a["group"], a["reason"]) for subj, a in advisories] == [
                ("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.S.O", "B", "admin"),
                ("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.S.P", "A", "admin")]
    run(scenario)


# --- prioritized --------------------------------------------------------------------------

def test_prioritized_serves_the_lowest_priority_number_first(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
            await consumer(s, "R", priority_policy="prioritized", priority_groups=["A"])
            inboxes = {}
            for label, body in [("p5", pull(priority=5, expires=30)), ("p1", pull(priority=1, expires=30)),
                                ("plain", b"1"), ("p3a", pull(priority=3, expires=30)),
                                ("p0", pull(expires=30)), ("p3b", pull(priority=3, batch=2, expires=30))]:
                inboxes[label] = await Inbox(s, f"in.{label}").start()
                await inboxes[label].pull("R", body)

            async def all_waiting():
                return (await s.api("$JS.API.CONSUMER.INFO.S.R"))["num_waiting"] == 6
            await apoll(all_waiting, "six requests waiting")
            for k in range(7):
                await s.js.publish("s.1", f"m{k}".encode())
            await apoll(lambda: sum(i.queue.qsize() for i in inboxes.values()) >= 7, "seven deliveries")
            order = sorted((i.queue.get_nowait().data.decode(), label)
                           for label, i in inboxes.items() for _ in range(i.queue.qsize()))
            assert order == [("m0", "p0"), ("m1", "p1"), ("m2", "p3a"), ("m3", "p3b"), ("m4", "p3b"),
                             ("m5", "p5"), ("m6", "plain")], order
            info = await s.api("$JS.API.CONSUMER.INFO.S.R")
            assert (info["num_waiting"], info["num_pending"]) == (0, 0), info
    run(scenario)


# --- three servers --------------------------------------------------------------------------

def test_the_pin_is_the_leaders_alone_across_a_step_down_and_a_sigkill(formed_cluster, server_kind):
    with formed_cluster(server_kind, "pin", 3, jetstream=True) as c:
        names = list(c.servers)

        async def info_of(s) -> dict | None:
            info = await s.api("$JS.API.CONSUMER.INFO.K.C")
            return info if "error" not in info and info.get("cluster", {}).get("leader") else None

        async def pinned_by(s, label: str, old: set[str]) -> str:
            """A new pull request without an id is pinned with an id none of ``old``."""
            async def served():
                inbox = await Inbox(s, f"{label}.{time.monotonic_ns()}").start()
                await inbox.pull("C", pull(expires=2), stream="K")
                try:
                    msg = await inbox.next(timeout=4)
                except asyncio.TimeoutError:
                    return None
                return msg if status(msg) == (None, None) else None
            msg = await apoll(served, f"{label}: a message pinned", timeout=60, retry_on=(NatsTimeoutError,))
            pin = msg.headers["Nats-Pin-Id"]
            assert pin and pin not in old, (pin, old)
            return pin

        async def unpinned(s, leader: str | None):
            info = await info_of(s)
            if info is None or info["cluster"]["leader"] == leader:
                return None
            return info if info["priority_groups"] == [{"group": "A", "pinned_ts": ZERO}] else None

        async def first() -> tuple[str, str]:
            async with js_session(c.servers[names[0]].url) as s:
                created = await asked_again(lambda: s.api("$JS.API.STREAM.CREATE.K", {
                    "name": "K", "subjects": ["k"], "num_replicas": 3}), "K created")
                assert "error" not in created, created
                made = await asked_again(lambda: consumer(s, "C", stream="K", priority_policy="pinned_client",
                                                          priority_groups=["A"], num_replicas=3), "C created")
                assert "error" not in made, made
                await asked_again(lambda: s.js.publish("k", b"m0"), "m0")
                pin = await pinned_by(s, "one", set())
                info = await apoll(lambda: info_of(s), "C info", retry_on=(NatsTimeoutError,))
                assert info["priority_groups"][0]["pinned_client_id"] == pin
                leader = info["cluster"]["leader"]
                step = await asked_again(lambda: s.api("$JS.API.CONSUMER.LEADER.STEPDOWN.K.C"), "step-down")
                assert step.get("success") is True, step
                # the new leader holds no pin: the old one's request is refused when a message comes
                await apoll(lambda: unpinned(s, leader), "unpinned under a new leader", timeout=30,
                            retry_on=(NatsTimeoutError,))
                stale = await Inbox(s, "stale").start()
                await stale.pull("C", pull(id=pin, expires=10), stream="K")
                await asked_again(lambda: s.js.publish("k", b"m1"), "m1")
                assert status(await stale.next(timeout=10)) == ("423", "Nats-Wrong-Pin-Id")
                pin2 = await pinned_by(s, "two", {pin})
                info = await apoll(lambda: info_of(s), "C info", retry_on=(NatsTimeoutError,))
                assert info["priority_groups"][0]["pinned_client_id"] == pin2
                return info["cluster"]["leader"], pin2

        leader, pin2 = run(first, timeout=180)
        c.kill(leader)
        survivor = next(n for n in names if n != leader)

        async def after() -> None:
            async with js_session(c.servers[survivor].url) as s:
                await apoll(lambda: unpinned(s, leader), "unpinned under the next leader", timeout=60,
                            retry_on=(NatsTimeoutError,))
                await asked_again(lambda: s.api("$JS.API.STREAM.INFO.K"), "K info")
                await asked_again(lambda: s.js.publish("k", b"m2"), "m2")
                pin3 = await pinned_by(s, "three", {pin2})
                # UNPIN in a cluster: a stream or consumer not found is said first
                answers = [(await asked_again(lambda subject=subject, raw=raw: s.api(
                    f"$JS.API.CONSUMER.UNPIN.{subject}", raw=raw), "unpin")).get("error", {}).get("err_code")
                    for subject, raw in [("X.C", b"x"), ("K.X", b"x"), ("K.C", b'{"group":"Z"}'),
                                         ("K.C", b"{}"), ("K.C", b'{"group":"A"}')]]
                assert answers == [10059, 10014, 10160, 10025, None], answers
                info = await apoll(lambda: info_of(s), "C info", retry_on=(NatsTimeoutError,))
                assert info["priority_groups"] == [{"group": "A", "pinned_ts": ZERO}], (info, pin3)
        run(after, timeout=180)
        c.restart(leader)
