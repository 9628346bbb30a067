"""User permissions: which subjects a user may publish to and subscribe to.

The format and its meaning are nats-server's (``server/opts.go``
``parseUserPermissions``, ``parseVariablePermissions``, ``parseSubjectPermission``,
``parseAllowResponses``, ``checkPermSubjectArray``; ``server/auth.go``
``validateResponsePermissions``)::

    permissions {
      publish   { allow: ["orders.>", "_INBOX.>"], deny: "orders.secret" }
      subscribe: "public.>"            # a single subject or a list: the allow list
      allow_responses: { max: 1, expires: "2m" }   # or true
    }

Aliases: ``pub``/``publish``/``import``, ``sub``/``subscribe``/``export``,
``allow_responses``/``publish_allow_responses``. A subscribe subject may carry a queue
group after a space (``"jobs.* workers"``). Invalid subjects, unknown keys and values
of the wrong type are :class:`~jetraft.config.errors.ConfigError` at the file, line
and column of the offending value (nats-server refuses them too).

Units: :attr:`ResponsePermission.expires` is float SECONDS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .durations import parse_duration
from .errors import ConfigError
from .parser import Value

__all__ = [
    "DEFAULT_RESPONSE_EXPIRES",
    "DEFAULT_RESPONSE_MAX_MSGS",
    "Permissions",
    "ResponsePermission",
    "SubjectPermission",
    "is_valid_permission_subject",
    "read_permissions",
]

#: nats-server const.go DEFAULT_ALLOW_RESPONSE_MAX_MSGS.
DEFAULT_RESPONSE_MAX_MSGS = 1
#: nats-server const.go DEFAULT_ALLOW_RESPONSE_EXPIRATION (2 minutes), in seconds.
DEFAULT_RESPONSE_EXPIRES = 120.0

_WHITESPACE = "\t\n\f\r "


@dataclass(frozen=True, slots=True)
class SubjectPermission:
    """Subjects allowed and denied, for publishing or for subscribing.

    ``allow`` None means everything is allowed (unless denied). An empty ``allow``
    means nothing may be published (nats-server turns off the blanket allow), but for
    subscribing an empty ``allow`` restricts nothing, as in nats-server
    client.go setPermissions. ``deny`` wins over ``allow``. Subscribe entries may be
    ``"subject queue"``.
    """

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ResponsePermission:
    """``allow_responses``: a client may publish to the reply subject of a message it
    received, ``max_msgs`` times (<= 0: no limit) within ``expires`` seconds of the
    delivery (<= 0: no expiry). nats-server ResponsePermission."""

    max_msgs: int = DEFAULT_RESPONSE_MAX_MSGS
    expires: float = DEFAULT_RESPONSE_EXPIRES


@dataclass(frozen=True, slots=True)
class Permissions:
    """A user's permissions (nats-server Permissions). None parts restrict nothing.

    When ``allow_responses`` is set and ``publish.allow`` is not, ``publish.allow`` is
    the empty tuple: such a user may publish responses only (auth.go
    validateResponsePermissions); :func:`read_permissions` applies that rule."""

    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    allow_responses: ResponsePermission | None = None


def is_valid_permission_subject(subject: str) -> bool:
    """nats-server sublist.go IsValidSubject: non-empty, no empty token, no whitespace,
    nothing after a ``>`` token. Never raises."""
    if not subject or any(c in subject for c in _WHITESPACE):
        return False
    tokens = subject.split(".")
    if "" in tokens:
        return False
    return ">" not in tokens[:-1]


def _quoted(text: str) -> str:
    """Double-quoted, as nats-server's ``%q`` shows a subject."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _check_subject(subject: str, allow_queue: bool) -> str | None:
    """Why ``subject`` cannot be a permission entry (None if it can), in nats-server's
    words (opts.go checkPermSubjectArray)."""
    if is_valid_permission_subject(subject):
        return None
    if not allow_queue:
        return f"subject {_quoted(subject)} is not a valid subject"
    elements = subject.split()
    if len(elements) != 2:
        return f"subject {_quoted(subject)} is not a valid subject"
    if not is_valid_permission_subject(elements[0]):
        return f"subject {_quoted(elements[0])} is not a valid subject"
    if not is_valid_permission_subject(elements[1]):
        return f"queue {_quoted(elements[1])} is not a valid queue"
    return None


def _kind(value: Value) -> str:
    return {"string": "a string", "integer": "an integer", "float": "a float", "boolean": "a boolean",
            "datetime": "a datetime", "array": "an array", "map": "a map"}.get(value.kind, value.kind)


def _map(value: Value, label: str, what: str) -> dict[str, Any]:
    if value.kind != "map":
        raise ConfigError.at(value.position, f"{label}: expected {what} to be a map, got {_kind(value)}")
    return value.data


def _subjects(value: Value, label: str, allow_queue: bool) -> tuple[str, ...]:
    """A subject or an array of subjects (opts.go parsePermSubjects), each checked."""
    if value.kind == "string":
        items = [(value, label)]
    elif value.kind == "array":
        items = [(item, f"{label}[{i}]") for i, item in enumerate(value.data)]
    else:
        raise ConfigError.at(
            value.position, f"{label}: expected a subject or an array of subjects, got {_kind(value)}"
        )
    subjects = []
    for item, item_label in items:
        if item.kind != "string":
            raise ConfigError.at(item.position, f"{item_label}: a subject in permissions must be a string, got {_kind(item)}")
        problem = _check_subject(item.data, allow_queue)
        if problem is not None:
            raise ConfigError.at(item.position, f"{item_label}: {problem}")
        subjects.append(item.data)
    return tuple(subjects)


def _subject_permission(value: Value, label: str, allow_queue: bool) -> SubjectPermission | None:
    """opts.go parseVariablePermissions: ``{allow, deny}`` (an empty map: None), or a
    subject or list of subjects meaning ``allow``."""
    if value.kind != "map":
        return SubjectPermission(allow=_subjects(value, label, allow_queue))
    if not value.data:
        return None
    allow = deny = None
    for entry in value.data.values():
        key = entry.key.lower()
        entry_label = f"{label}.{entry.key}"
        if key == "allow":
            allow = _subjects(entry.value, entry_label, allow_queue)
        elif key == "deny":
            deny = _subjects(entry.value, entry_label, allow_queue)
        elif not entry.value.used:
            raise ConfigError.at(
                entry.key_position,
                f"{entry_label}: unknown field {entry.key!r} parsing subject permissions, "
                "only 'allow' or 'deny' are permitted",
            )
    return SubjectPermission(allow, deny)


def _response_permission(value: Value, label: str) -> ResponsePermission | None:
    """opts.go parseAllowResponses: true (defaults), false (None) or ``{max, expires}``;
    0 means the default, a negative number no limit."""
    if value.kind == "boolean":
        return ResponsePermission() if value.data else None
    if value.kind != "map":
        raise ConfigError.at(value.position, f"{label}: error parsing response permissions, expected a boolean or a map")
    max_msgs, expires = DEFAULT_RESPONSE_MAX_MSGS, DEFAULT_RESPONSE_EXPIRES
    for entry in value.data.values():
        key = entry.key.lower()
        entry_label = f"{label}.{entry.key}"
        v = entry.value
        if key in ("max", "max_msgs", "max_messages", "max_responses"):
            if v.kind != "integer":
                raise ConfigError.at(v.position, f"{entry_label}: expected an integer, got {_kind(v)}")
            max_msgs = v.data or DEFAULT_RESPONSE_MAX_MSGS
        elif key in ("expires", "expiration", "ttl"):
            if v.kind != "string":
                raise ConfigError.at(v.position, f"{entry_label}: error parsing expires, not a duration string")
            try:
                seconds = parse_duration(v.data)
            except ValueError as e:
                raise ConfigError.at(v.position, f"{entry_label}: error parsing expires: {e}") from None
            expires = seconds or DEFAULT_RESPONSE_EXPIRES
        elif not v.used:
            raise ConfigError.at(entry.key_position, f"{entry_label}: unknown field {entry.key!r} parsing permissions")
    return ResponsePermission(max_msgs, expires)


def read_permissions(value: Value, label: str) -> Permissions:
    """A ``permissions``/``default_permissions`` map as :class:`Permissions`.

    ``label`` names the key in messages (``"accounts.A.users[0].permissions"``).
    Raises ConfigError at the offending key or value: not a map, an unknown key, an
    invalid subject or queue, a wrong type.
    """
    data = _map(value, label, "permissions")
    publish = subscribe = responses = None
    for entry in data.values():
        key = entry.key.lower()
        entry_label = f"{label}.{entry.key}"
        if key in ("pub", "publish", "import"):
            publish = _subject_permission(entry.value, entry_label, allow_queue=False)
        elif key in ("sub", "subscribe", "export"):
            subscribe = _subject_permission(entry.value, entry_label, allow_queue=True)
        elif key in ("publish_allow_responses", "allow_responses"):
            responses = _response_permission(entry.value, entry_label)
        elif not entry.value.used:
            raise ConfigError.at(entry.key_position, f"{entry_label}: unknown field {entry.key!r} parsing permissions")
    if responses is not None and (publish is None or publish.allow is None):
        # auth.go validateResponsePermissions: the blanket publish allow is turned off
        publish = SubjectPermission(allow=(), deny=publish.deny if publish else None)
    return Permissions(publish, subscribe, responses)
