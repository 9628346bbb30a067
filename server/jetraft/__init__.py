"""jetraft: a NATS-compatible JetStream server with its own RAFT, and the appliance around it."""

__version__ = "0.1.0"

#: The nats-server version jetraft advertises in INFO. nats-py enables the
#: consumer-name API for servers ``>= 2.9`` (nats.py js/manager.py), so this must
#: stay a 2.x semver.
NATS_COMPAT_VERSION = "2.10.24"
