"""Sans-IO codecs for the NATS client protocol, and the subject index.

Stdlib only; imports nothing else from jetraft; does no I/O.
:mod:`jetraft.protocol.client`: ``ClientParser`` (client bytes -> commands) and
the encoders (``encode_info``, ``encode_msg``, ``encode_err``, ``status_headers``...).
:mod:`jetraft.protocol.subjects`: subject rules and ``SubjectIndex``.
:mod:`jetraft.protocol.message`: ``Message``, one message as every layer passes it.
Every public name of the three is re-exported here.
"""

from jetraft.protocol import client as _client
from jetraft.protocol import message as _message
from jetraft.protocol import subjects as _subjects
from jetraft.protocol.client import *  # noqa: F403 - the names are client.__all__
from jetraft.protocol.message import *  # noqa: F403 - the names are message.__all__
from jetraft.protocol.subjects import *  # noqa: F403 - the names are subjects.__all__

__all__ = [*_client.__all__, *_message.__all__, *_subjects.__all__]
