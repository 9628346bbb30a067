"""``jetraft_bcrypt``: a bcrypt hash of a password whose salt is derived from a seed.

``{{ password | jetraft_bcrypt(inventory_hostname, cost=11) }}`` gives the same hash on every
run for the same host (so the templated configuration does not change on a second run),
and different hashes on different hosts. The salt is the first 16 bytes of
SHA-256(b"jetraft-bcrypt-salt\\0" + seed + b"\\0" + password), in bcrypt's base64. Hashing
uses the ``bcrypt`` package directly: passlib 1.7.4 breaks with bcrypt 5.
"""

from __future__ import annotations

import hashlib

import bcrypt
from ansible.errors import AnsibleFilterError

_B64 = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _bcrypt_b64(raw: bytes) -> str:
    """bcrypt's base64 (its own alphabet, no padding) of 16 bytes: 22 characters."""
    bits = int.from_bytes(raw, "big") << 4          # 128 bits -> 132 = 22 * 6
    return "".join(_B64[(bits >> (6 * i)) & 63] for i in range(21, -1, -1))


def jetraft_bcrypt(password: object, seed: object, cost: int = 11) -> str:
    """The ``$2b$`` hash of ``password`` with a salt derived from ``seed``. Raises
    AnsibleFilterError for an empty password, a cost outside 4..31, or a password longer
    than bcrypt's 72 bytes."""
    if not isinstance(password, str) or not password:
        raise AnsibleFilterError("jetraft_bcrypt: the password must be a non-empty string")
    secret = password.encode()
    if len(secret) > 72:
        raise AnsibleFilterError("jetraft_bcrypt: bcrypt uses at most 72 bytes of a password")
    cost = int(cost)
    if not 4 <= cost <= 31:
        raise AnsibleFilterError(f"jetraft_bcrypt: cost {cost} is outside 4..31")
    digest = hashlib.sha256(b"jetraft-bcrypt-salt\0" + str(seed).encode() + b"\0" + secret).digest()
    salt = f"$2b${cost:02d}${_bcrypt_b64(digest[:16])}".encode()
    return bcrypt.hashpw(secret, salt).decode()


class FilterModule:
    def filters(self):
        return {"jetraft_bcrypt": jetraft_bcrypt}
