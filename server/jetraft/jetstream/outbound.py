"""What the JetStream state machines ask the server to send.

The stream, consumer and API code is sans-IO: instead of writing to sockets it returns
:class:`Outbound` messages, which the server routes within the account exactly as if a
client had published them (``net``/``server.py`` do the sending).
"""

from __future__ import annotations

from jetraft.protocol.message import Message

__all__ = ["Outbound"]

#: One message to route: the server's own :class:`~jetraft.protocol.message.Message`
#: (``Outbound(subject, reply, headers, data)``; ``.data`` is its ``payload``), so a reply
#: or delivery is routed as it is, never copied.
Outbound = Message
