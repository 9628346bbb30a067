"""Admission to a stream's store: the checks every message passes when it enters a store
by any door other than a client's publish.

The doors: a stream restore (``$JS.API.STREAM.RESTORE``, :func:`jetraft.jetstream.snapshot.
build_restored_store`), and a file store opened over block files (a restart, and the
blocks a replica fetched from a peer in a catch-up, ``jetstream/catchup.py``: both go
through ``FileStore`` recovery in ``jetstream/store.py``), and a publish entry of a stream's
RAFT log as a replica applies it (``jetstream/replicated.py`` ``decode_entry``: the subject
rule and the timestamp range, so that no peer's entry can carry what the leader's protocol
parser would have refused; a refused entry is skipped alike on every replica). A publish is checked by the
protocol parser (the subject is one token of a ``PUB``/``HPUB`` line) and by
``Stream.publish`` (sizes); what arrives by the other doors was never parsed, so it is
checked here with the same rules, and refused as a whole (a restore) or treated as a
damaged record (a store's recovery: reported, counted as lost, never served).

Why it matters: a stored subject is written verbatim into the ``MSG``/``HMSG`` line of
every delivery and into ``DIRECT.GET``'s ``Nats-Subject`` header. A subject holding
``\\r\\n`` would let whoever wrote it forge protocol frames to every reader of the stream.

Rules (nats-server ``server/client.go`` ``processPub``, ``server/stream.go``
``processJetStreamMsg``):

- subject: non-empty, no space, tab, CR, LF or form feed (``PUB`` arguments are split on
  whitespace), no empty token (a stream's subject filter never captures one), and, at a
  restore, at most the server's ``max_control_line`` bytes (the ``PUB`` line bounds it);
- headers: at a restore, a block of at most :data:`MAX_HEADER_BYTES` that parses as a
  NATS header block (``NATS/1.0`` ... ``\\r\\n\\r\\n``, :func:`jetraft.protocol.headers.parse`);
- size: headers plus data at most the stream's ``max_msg_size`` and the server's
  ``max_payload`` (a restore);
- sequence 1 .. 2**63 - 1 and timestamp 0 .. 2**63 - 1 ns (the store's index columns are
  signed 64-bit).

Recovery is lenient where a publish was: a message a client stored with a header block
that does not parse (``HPUB`` does not check one) is kept; only what no publish could have
stored is refused there.
"""

from __future__ import annotations

from dataclasses import dataclass

from jetraft.protocol.headers import HeaderError
from jetraft.protocol.headers import parse as parse_headers

__all__ = ["MAX_HEADER_BYTES", "MAX_SEQ", "MAX_TS", "Admission", "InadmissibleMessage",
           "check_message", "subject_problem"]

#: Largest header block a publish may carry (nats-server JSMessageHeaderTooLarge, 10097).
MAX_HEADER_BYTES = 65535
#: Largest sequence and timestamp (ns) a store holds: signed 64-bit index columns.
MAX_SEQ = (1 << 63) - 1
MAX_TS = (1 << 63) - 1
#: Characters that end a ``PUB`` argument (nats-server client.go splits on them).
_BREAKS = (" ", "\t", "\r", "\n", "\f")


class InadmissibleMessage(ValueError):
    """A message that no publish could have stored; the text says which rule it breaks."""


@dataclass(frozen=True, slots=True)
class Admission:
    """The limits of one door. ``max_subject``: bytes of a subject (0: no limit beyond
    the rules); ``max_msg``: bytes of headers plus data (0: no limit); ``strict_headers``:
    a header block must parse and be at most :data:`MAX_HEADER_BYTES`."""

    max_subject: int = 0
    max_msg: int = 0
    strict_headers: bool = True


#: Recovery of a store from its own files: only what breaks the protocol or the index.
RECOVERY = Admission(strict_headers=False)


def subject_problem(subject: str, max_bytes: int = 0) -> str | None:
    """Why ``subject`` cannot be a stored message's subject, or None when it can (see the
    module docstring). ``max_bytes`` > 0 bounds its UTF-8 length. Never raises."""
    if not subject:
        return "is empty"
    for ch in _BREAKS:
        if ch in subject:
            return "holds whitespace or a line break"
    if subject[0] == "." or subject[-1] == "." or ".." in subject:
        return "has an empty token"
    if max_bytes > 0 and len(subject) > max_bytes // 4 \
            and len(subject.encode("utf-8", "surrogateescape")) > max_bytes:
        return f"is longer than {max_bytes} bytes"
    return None


def check_message(seq: int, subject: str, headers: bytes | None, data: bytes, ts: int,
                  admission: Admission = RECOVERY) -> None:
    """Check one message about to enter a store (``seq``; ``ts`` in ns since the epoch;
    ``headers`` the raw block or None). Raises :class:`InadmissibleMessage` naming the
    sequence and the rule broken."""
    if not 1 <= seq <= MAX_SEQ:
        raise InadmissibleMessage(f"message sequence {seq} is out of range (1 .. 2^63-1)")
    if not 0 <= ts <= MAX_TS:
        raise InadmissibleMessage(f"message {seq}: timestamp {ts} is out of range (0 .. 2^63-1 ns)")
    problem = subject_problem(subject, admission.max_subject)
    if problem is not None:
        raise InadmissibleMessage(f"message {seq}: subject {_short(subject)} {problem}")
    hlen = len(headers) if headers else 0
    if hlen and admission.strict_headers:
        if hlen > MAX_HEADER_BYTES:
            raise InadmissibleMessage(f"message {seq}: header block of {hlen} bytes is over "
                                      f"{MAX_HEADER_BYTES}")
        try:
            parse_headers(headers)
        except HeaderError as exc:
            raise InadmissibleMessage(f"message {seq}: malformed header block: {exc}") from None
    if admission.max_msg > 0 and hlen + len(data) > admission.max_msg:
        raise InadmissibleMessage(f"message {seq}: {hlen + len(data)} bytes of headers and data "
                                  f"are over the limit of {admission.max_msg}")


def _short(subject: str) -> str:
    text = repr(subject)
    return text if len(text) <= 80 else text[:77] + "..."
