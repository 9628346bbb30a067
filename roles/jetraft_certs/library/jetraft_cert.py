#!/usr/bin/python
"""Documentation of the ``jetraft_cert`` action (action_plugins/jetraft_cert.py does the
work, on the controller); this file is what ansible-doc and ansible-lint read."""

DOCUMENTATION = r"""
module: jetraft_cert
short_description: The cluster's CA and its hosts' certificates, on the controller
description:
  - Makes and keeps, in a directory on the controller, the cluster's certificate authority
    (C(ca.crt), C(ca.key) 0600), a CA staged by a rotation (C(ca-next.*)), the CA a rotation
    replaced (C(ca-prev.crt)), the bundle hosts trust (C(ca-bundle.crt)), and one certificate
    and key per host (C(hosts/<name>.crt), C(hosts/<name>.key) 0600), with the C(cryptography)
    package. Runs on the controller whatever host the task is for.
  - A host certificate is remade when missing, not matching its key, not signed by the
    current CA, carrying other names than O(sans), not yet valid, expiring within
    O(renew_days), or when O(force) is set; otherwise nothing changes.
options:
  kind:
    description: C(ca) for the certificate authority, C(cert) for a host's certificate.
    type: str
    required: true
    choices: [ca, cert]
  dir:
    description: The PKI directory on the controller (made 0700).
    type: path
    required: true
  ca_action:
    description:
      - With O(kind=ca) - C(ensure) makes a CA when there is none; C(stage) makes a new CA
        that is trusted (in the bundle) but does not sign yet; C(promote) makes the staged CA
        the one that signs and keeps the replaced one trusted as C(ca-prev.crt); C(retire)
        stops trusting C(ca-prev.crt).
    type: str
    default: ensure
    choices: [ensure, stage, promote, retire]
  common_name:
    description: The certificate's common name (the CA's gets a time stamp appended).
    type: str
    required: true
  name:
    description: With O(kind=cert), the file name of the host's certificate and key.
    type: str
  sans:
    description: DNS names and IP addresses the host's certificate carries (compared as sets).
    type: list
    elements: str
    default: []
  days:
    description: Validity of a new certificate, in days (capped at the CA's own expiry).
    type: int
    default: 365
  renew_days:
    description: A host certificate expiring within this many days is remade; a CA is reported C(expires_soon).
    type: int
    default: 30
  force:
    description: Make a new host certificate and key even when the one there is good.
    type: bool
    default: false
author: jetraft
"""

RETURN = r"""
reasons:
  description: What changed and why.
  type: list
  returned: always
not_after:
  description: The certificate's expiry (ISO 8601, UTC).
  type: str
  returned: success
days_left:
  description: Whole days until the certificate expires.
  type: int
  returned: success
dns_names:
  description: The certificate's DNS names.
  type: list
  returned: with kind=cert
ip_addresses:
  description: The certificate's IP addresses.
  type: list
  returned: with kind=cert
expires_soon:
  description: With kind=ca, the CA expires within renew_days (rotate it).
  type: bool
  returned: with kind=ca
"""
