"""What the JetStream state machines ask the server to send.

The stream, consumer and API code is sans-IO: instead of writing to sockets it returns
:class:`Outbound` messages, which the server routes within the account exactly as if a
client had published them (``net``/``server.py`` do the sending).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Outbound"]


@dataclass(frozen=True, slots=True)
class Outbound:
    """One message to route: ``subject``, optional ``reply`` subject, the raw NATS header
    block (``b"NATS/1.0..."``, or None for a plain MSG) and the payload bytes."""

    subject: str
    reply: str | None
    headers: bytes | None
    data: bytes
