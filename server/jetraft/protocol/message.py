"""One NATS message as every layer passes it: :class:`Message`.

A client's PUB/HPUB (:class:`~jetraft.protocol.client.ClientParser` yields it as
``Pub``), a message a peer routed here, and what JetStream asks the server to send
(``jetraft.jetstream.outbound.Outbound``) are all this one value: the server routes it
without taking it apart, and every subscriber's MSG/HMSG is encoded from the same one.
Stdlib only; imports nothing else from jetraft.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Message"]


@dataclass(slots=True)
class Message:
    """A message: routed on ``subject``; ``reply`` the optional reply subject; ``headers``
    the raw NATS header block including its final ``b"\\r\\n\\r\\n"`` (``b"NATS/1.0..."``),
    or None for a plain PUB/MSG (an HPUB with header length 0 is a plain message, as in
    nats-server); ``payload`` the body bytes, without headers and trailing CRLF.

    ``deliver_as``: the subject written on subscribers' MSG/HMSG lines when it is not
    ``subject`` -- a JetStream consumer delivery is routed to its deliver subject or pull
    inbox and shown with the stored message's subject (nats-server consumer.go
    deliverMsg); None otherwise.

    Never changed once made (it is shared by every subscriber it reaches); a slots class
    rather than a frozen dataclass or NamedTuple because one is made per published message
    and read once per subscriber.
    """

    subject: str
    reply: str | None
    headers: bytes | None
    payload: bytes
    deliver_as: str | None = None

    @property
    def data(self) -> bytes:
        """``payload`` under the name JetStream's state machines use for message bodies."""
        return self.payload
