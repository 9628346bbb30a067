"""``jetraft_certs_info``: what an operator needs to know of the certificates in PEM text.

``{{ lookup('file', 'ca.crt') | jetraft_certs_info }}`` gives one entry per certificate in
the text (a CA bundle holds several), each with ``subject``, ``not_after`` (ISO 8601, UTC)
and ``days_left`` (whole days from now; negative once expired). Parsed on the controller
with the ``cryptography`` package. Raises AnsibleFilterError for text holding no
certificate or one that cannot be parsed.
"""

from __future__ import annotations

import datetime as dt

from ansible.errors import AnsibleFilterError
from cryptography import x509


def jetraft_certs_info(pem: object) -> list[dict]:
    """The certificates of ``pem`` (str or bytes), in order; see the module docstring."""
    data = pem.encode() if isinstance(pem, str) else bytes(pem)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise AnsibleFilterError(f"jetraft_certs_info: no certificate could be read: {exc}") from None
    now = dt.datetime.now(dt.timezone.utc)
    return [{"subject": c.subject.rfc4514_string(),
             "not_after": c.not_valid_after_utc.isoformat(),
             "days_left": (c.not_valid_after_utc - now).days} for c in certs]


class FilterModule:
    def filters(self):
        return {"jetraft_certs_info": jetraft_certs_info}
