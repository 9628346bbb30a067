"""jetraft: a NATS-compatible JetStream server with its own RAFT, and the appliance around it."""

import re as _re

__version__ = "0.1.0"

#: The nats-server release whose client-visible features jetraft provides: 2.12's (TTLs,
#: counters, atomic batches, schedules, priority groups; docs/jetstream.md lists what of
#: later releases it serves and what it refuses). Clients gate features on it: nats-py
#: enables the consumer-name API for servers ``>= 2.9`` (nats.py js/manager.py) and its
#: tests the 2.11 and 2.12 features, so this must stay a 2.x semver.
NATS_FEATURE_VERSION = "2.12.1"


def nats_version(release: str) -> str:
    """The version a jetraft ``release`` reports where nats-server reports its own:
    :data:`NATS_FEATURE_VERSION` with ``jetraft.<release>`` as semver build metadata, e.g.
    ``"2.12.1+jetraft.0.1.0"``. Build metadata does not change a version's precedence
    (semver.org item 10), so a client comparing versions (nats-py ``ServerVersion``, nats.go
    ``versionComponents``) reads 2.12.1. In ``release``, ``+`` (a local version such as
    ``0.1.0+lab.1``) becomes ``.`` and any other character build metadata does not allow
    becomes ``-``; empty identifiers are dropped."""
    metadata = _re.sub(r"[^0-9A-Za-z.-]", "-", release.replace("+", "."))
    parts = [part for part in metadata.split(".") if part]
    return f"{NATS_FEATURE_VERSION}+{'.'.join(['jetraft', *parts])}"


#: The version every place the server reports one shows: INFO to clients, /varz, ``$SYS``
#: STATSZ/VARZ and server info, JetStream's ``_nats.ver`` metadata, the metrics' info labels
#: (:func:`nats_version` of :data:`__version__`).
NATS_COMPAT_VERSION = nats_version(__version__)
