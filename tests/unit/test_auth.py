"""Authentication decisions (jetraft.auth), from configurations as operators write them."""

from __future__ import annotations

import pytest

from jetraft.auth import GLOBAL_ACCOUNT, Authenticator, AuthError, check_password
from jetraft.config import config_from_text

SEED_HASH = "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
SEED_PASSWORD = "a very long s3cr3t! password"

ACCOUNTS = f"""
accounts {{
  $SYS {{ users = [ {{ user: "admin", pass: "{SEED_HASH}" }} ] }}
  APP {{ users = [ {{ user: "app", pass: "plain-secret" }} ] }}
}}
"""


def auth(text: str) -> Authenticator:
    return Authenticator(config_from_text(text))


def test_no_users_means_no_authentication():
    a = auth("port: 4222")
    assert not a.required
    assert a.verify(None, None, None).account == GLOBAL_ACCOUNT


def test_seed_bcrypt_admin_in_system_account():
    a = auth(ACCOUNTS)
    assert a.required
    identity = a.verify("admin", SEED_PASSWORD, None)
    assert (identity.user, identity.account) == ("admin", "$SYS")
    with pytest.raises(AuthError, match="bad password"):
        a.verify("admin", SEED_PASSWORD + "x", None)


def test_plain_password_and_unknown_user():
    a = auth(ACCOUNTS)
    assert a.verify("app", "plain-secret", None).account == "APP"
    with pytest.raises(AuthError, match="bad password"):
        a.verify("app", "plain-secre", None)
    with pytest.raises(AuthError, match="unknown user"):
        a.verify("nobody", "x", None)
    with pytest.raises(AuthError, match="no credentials"):
        a.verify(None, None, None)


def test_authorization_block_user_and_token():
    a = auth('authorization { user: "u", password: "p", timeout: 3 }')
    assert a.timeout == 3
    assert a.verify("u", "p", None).account == GLOBAL_ACCOUNT
    t = auth('authorization { token: "s3cr3t" }')
    assert t.verify(None, None, "s3cr3t").user is None
    with pytest.raises(AuthError, match="bad token"):
        t.verify(None, None, "guess")


def test_no_auth_user_binds_anonymous_clients():
    a = auth(ACCOUNTS + 'no_auth_user: "app"\n')
    assert a.verify(None, None, None).user == "app"


@pytest.mark.parametrize("stored,given,ok", [
    (SEED_HASH, SEED_PASSWORD, True),
    (SEED_HASH, "", False),
    ("$2b$04$" + "x" * 53, "anything", False),  # malformed hash: refused, not a crash
    ("plain", "plain", True),
    ("plain", "Plain", False),
])
def test_check_password(stored, given, ok):
    assert check_password(stored, given) is ok


def test_reload_keeps_unchanged_users_and_drops_changed_ones():
    before = auth(ACCOUNTS)
    after = auth(ACCOUNTS.replace("plain-secret", "rotated"))
    admin = before.verify("admin", SEED_PASSWORD, None)
    app = before.verify("app", "plain-secret", None)
    assert after.still_valid(admin, before)
    assert not after.still_valid(app, before)
