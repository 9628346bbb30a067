"""The router alone, driven through its Protocols (jetraft.net.ports) by stand-ins: no
server, no sockets. Behaviour: nats-server client.go processInboundClientMsg /
processMsgResults (plain subscribers each get a copy, one member per queue group, echo,
503 no-responders)."""

from __future__ import annotations

from types import SimpleNamespace

from jetraft.net.transport.router import Router
from jetraft.protocol import Message


class Client:
    """A stand-in connection: records what it is given."""

    def __init__(self, router: Router, *, echo: bool = True, no_responders: bool = False,
                 refuse: bool = False) -> None:
        self.account = router.account("$G")
        self.echo = echo
        self.no_responders = no_responders
        self.refuse = refuse
        self.got: list[tuple[str, Message]] = []
        self.sent: list[bytes] = []

    def deliver(self, sub, msg: Message) -> bool:
        if self.refuse:
            return False
        self.got.append((sub.sid, msg))
        return True

    def send(self, data: bytes) -> None:
        self.sent.append(data)


class Sub:
    def __init__(self, client: Client, sid: str, queue: str | None) -> None:
        self.client, self.sid, self.queue = client, sid, queue


def subscribe(client: Client, subject: str, sid: str, queue: str | None = None) -> None:
    client.account.sublist.insert(subject, Sub(client, sid, queue), queue)


def new_router() -> Router:
    stats = SimpleNamespace(in_msgs=0, in_bytes=0, out_msgs=0, out_bytes=0)
    return Router(SimpleNamespace(stats=stats, config=SimpleNamespace(system_account="$SYS")))


def test_plain_subscribers_each_get_the_same_message_and_one_queue_member_gets_it():
    router = new_router()
    a, b, q1, q2 = (Client(router) for _ in range(4))
    subscribe(a, "orders.*", "1")
    subscribe(b, "orders.new", "2")
    subscribe(q1, "orders.new", "3", "workers")
    subscribe(q2, "orders.new", "4", "workers")
    msg = Message("orders.new", "_INBOX.r", b"NATS/1.0\r\nA: 1\r\n\r\n", b"hi")
    router.publish(a, msg)
    assert a.got == [("1", msg)] and b.got == [("2", msg)]
    assert a.got[0][1] is msg                      # one value, never copied
    assert len(q1.got) + len(q2.got) == 1
    assert (router.stats.in_msgs, router.stats.in_bytes) == (1, 2 + len(msg.headers))


def test_without_echo_the_publisher_gets_nothing_and_a_request_to_nobody_gets_503():
    router = new_router()
    pub = Client(router, echo=False, no_responders=True)
    subscribe(pub, "req", "1")
    subscribe(pub, "_INBOX.me", "2")
    router.publish(pub, Message("req", "_INBOX.me", None, b"?"))
    assert pub.got == []
    [status] = pub.sent
    assert status.startswith(b"HMSG _INBOX.me 2 ") and b"503" in status


def test_a_queue_member_that_refuses_leaves_it_to_another_and_routed_queues_are_honoured():
    router = new_router()
    refusing, taking, other = Client(router, refuse=True), Client(router), Client(router)
    subscribe(refusing, "s", "1", "q")
    subscribe(taking, "s", "2", "q")
    subscribe(other, "s", "3", "r")
    msg = Message("s", None, None, b"x", deliver_as="shown")
    router.publish_from_route("n2", "$G", msg, ("q",))
    assert taking.got == [("2", msg)] and other.got == []
    router.publish_from_route("n2", "NOPE", msg, ("q", "r"))   # an account this server lacks
    assert other.got == []
