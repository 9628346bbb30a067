"""Authentication and authorization decisions (jetraft.auth), from configurations as
operators write them; the rules are nats-server's (server/auth.go, server/client.go)."""

from __future__ import annotations

import pytest

from jetraft.auth import GLOBAL_ACCOUNT, Authenticator, AuthError, ClientPermissions, check_password
from jetraft.gofmt import quote as go_quote
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


# -- the hidden no-auth user (nats-server server.go configureAccounts) ---------------------------


def test_only_sys_users_lets_anonymous_clients_into_the_global_account():
    a = auth('accounts { $SYS { users = [ { user: "admin", pass: "x" } ] } }')
    assert a.required and a.advertise_auth   # INFO still says auth_required, as nats-server
    identity = a.verify(None, None, None)
    assert identity.account == GLOBAL_ACCOUNT and identity.permissions is None
    assert identity.user == a.hidden_user and a.hidden_user.startswith("nats-")
    assert a.verify("admin", "x", None).account == "$SYS"
    with pytest.raises(AuthError):
        a.verify("admin", "y", None)
    with pytest.raises(AuthError, match="unknown user"):   # the hidden user cannot be named
        a.verify(a.hidden_user, "", None)


@pytest.mark.parametrize("extra", [
    'accounts { $SYS { users = [ { user: "admin", pass: "x" } ] }, APP { } }',          # another account
    'accounts { $SYS { users = [ { user: "admin", pass: "x" } ] } }\nauthorization { timeout: 3 }',
    'accounts { $SYS { users = [ { user: "admin", pass: "x" } ] }, APP { users = [ { user: g } ] } }\n'
    'no_auth_user: g',
])
def test_no_hidden_user_otherwise(extra):
    a = auth(extra)
    assert a.hidden_user is None
    if a.no_auth_user is None:
        with pytest.raises(AuthError, match="no credentials"):
            a.verify(None, None, None)


def test_configured_no_auth_user_is_not_advertised_as_auth_required():
    a = auth(ACCOUNTS + 'no_auth_user: "app"\n')
    assert a.required and not a.advertise_auth


def test_hidden_user_keeps_its_name_across_reload():
    text = 'accounts { $SYS { users = [ { user: "admin", pass: "x" } ] } }'
    before = auth(text)
    after = Authenticator(config_from_text(text), before)
    anonymous = before.verify(None, None, None)
    assert after.hidden_user == before.hidden_user
    assert after.still_valid(anonymous, before)


# -- permissions -----------------------------------------------------------------------------------


def perms_for(permissions: str) -> ClientPermissions:
    a = auth(f"accounts {{ A {{ users: [ {{ user: u, pass: p, permissions: {permissions} }} ] }} }}")
    identity = a.verify("u", "p", None)
    client = a.client_permissions(identity)
    assert client is not None
    return client


def test_unrestricted_users_have_no_permission_state():
    a = auth(ACCOUNTS)
    assert a.client_permissions(a.verify("app", "plain-secret", None)) is None


@pytest.mark.parametrize("subject,allowed", [
    ("orders.new", True), ("orders.secret", False), ("orders.a.b", False), ("audit.a.b", True),
    ("audit", False), ("other", False),
])
def test_publish_allow_then_deny(subject, allowed):
    p = perms_for('{ publish: { allow: ["orders.*", "audit.>"], deny: "orders.secret" } }')
    assert p.restricts_publish
    assert p.can_publish(subject, 0.0) is allowed
    assert p.can_publish(subject, 0.0) is allowed          # from the cache


def test_empty_publish_allow_allows_nothing_but_empty_subscribe_allow_restricts_nothing():
    p = perms_for("{ publish: { allow: [] }, subscribe: { allow: [] } }")
    assert not p.can_publish("a", 0.0)
    assert p.can_subscribe("a", None)


@pytest.mark.parametrize("subject,queue,allowed", [
    ("jobs.a", "workers", True), ("jobs.a", "others", False), ("jobs.a", None, False),
    ("public.x", None, True), ("public.x", "any", True), ("public.>", None, True),
    ("public.hidden.x", None, False), ("public.hidden.>", None, False),
    ("private", None, False),
    ("public.*", "spies", False), ("public.*", "friends", True),
    ("wq.x", "v1.a", True), ("wq.x", "v2.a", False),
])
def test_subscribe_rules(subject, queue, allowed):
    p = perms_for('{ subscribe: { allow: ["jobs.* workers", "public.>", "wq.* v1.*"],'
                  ' deny: ["public.hidden.>", "public.* spies"] } }')
    assert p.can_subscribe(subject, queue) is allowed


def test_subscribe_allow_matches_the_sub_subject_tokens_literally():
    """nats-server matches a SUB subject's tokens literally against the allow list: a
    ``*`` entry admits a ``>`` token (sublist.go matchLevel)."""
    p = perms_for('{ subscribe: "public.*" }')
    assert p.can_subscribe("public.>", None)
    assert not p.can_subscribe("public.a.b", None)


def test_delivery_filter_turns_on_for_overlapping_wildcard_or_queue_subscriptions():
    p = perms_for('{ subscribe: { deny: ["secret.>", "jobs.hidden"] } }')
    assert p.can_subscribe("open.*", None) and not p.filters_delivery      # no overlap
    assert p.can_subscribe("jobs.visible", None) and not p.filters_delivery  # literal
    assert p.can_subscribe(">", None) and p.filters_delivery
    assert p.delivery_denied("secret.plans", None)
    assert p.delivery_denied("jobs.hidden", "workers")
    assert not p.delivery_denied("open.news", None)
    q = perms_for('{ subscribe: { deny: "jobs.hidden" } }')
    assert q.can_subscribe("jobs.hidden2", "workers") is True and not q.filters_delivery
    assert q.can_subscribe("jobs.*", "workers") and q.filters_delivery


def test_queue_deny_on_delivery():
    p = perms_for('{ subscribe: { deny: "jobs.hidden spies" } }')
    assert p.can_subscribe("jobs.*", "spies") and p.filters_delivery
    assert p.delivery_denied("jobs.hidden", "spies")
    assert not p.delivery_denied("jobs.hidden", "friends")
    assert not p.delivery_denied("jobs.hidden", None)


def test_allow_responses_default_one_response():
    p = perms_for("{ subscribe: svc, allow_responses: true }")
    assert p.tracks_replies and p.restricts_publish
    assert not p.can_publish("_INBOX.1", 0.0)
    p.note_delivery("_INBOX.1", 0.0)
    assert p.can_publish("_INBOX.1", 1.0)
    assert not p.can_publish("_INBOX.1", 1.0)


def test_allow_responses_max_and_expiry():
    p = perms_for('{ allow_responses: { max: 2, expires: "1s" } }')
    p.note_delivery("r1", 10.0)
    p.note_delivery("r2", 10.0)
    assert p.can_publish("r1", 10.5) and p.can_publish("r1", 10.6) and not p.can_publish("r1", 10.7)
    assert not p.can_publish("r2", 11.5)   # expired
    unlimited = perms_for('{ allow_responses: { max: -1, expires: "-1s" } }')
    unlimited.note_delivery("r", 0.0)
    assert all(unlimited.can_publish("r", 1e6) for _ in range(10))


def test_reply_on_an_allowed_subject_is_not_tracked():
    p = perms_for('{ publish: "_INBOX.>", allow_responses: true }')
    p.note_delivery("_INBOX.x", 0.0)
    assert p.reply_count == 0
    assert p.can_publish("_INBOX.x", 0.0) and p.can_publish("_INBOX.x", 0.0)
    p.note_delivery("other.x", 0.0)                  # not allowed otherwise: tracked
    assert p.reply_count == 1


def test_caches_and_reply_permissions_are_bounded():
    from jetraft.auth import DENY_CACHE_SIZE, PUB_CACHE_SIZE, REPLY_PRUNE_COUNT

    p = perms_for('{ publish: { deny: "x.>" }, subscribe: { deny: "x.>" }, allow_responses: { max: 1 } }')
    p.can_subscribe(">", None)
    for i in range(5000):
        p.can_publish(f"s.{i}", 0.0)
        p.delivery_denied(f"s.{i}", None)
    assert p.pub_cache_size <= PUB_CACHE_SIZE + 1
    assert p.deny_cache_size <= DENY_CACHE_SIZE + 1
    for i in range(3 * REPLY_PRUNE_COUNT):
        p.note_delivery(f"x.{i}", 0.0)
        assert p.can_publish(f"x.{i}", 0.0)          # used up: pruned at the next pass
    assert p.reply_count <= REPLY_PRUNE_COUNT + 1


def test_permissions_compiled_once_per_distinct_permissions():
    a = auth('authorization { default_permissions: { publish: "a" }, users: [ { user: x }, { user: y } ] }')
    px, py = (a.client_permissions(a.verify(name, None, None)) for name in ("x", "y"))
    assert px is not py and px.compiled is py.compiled


def test_reload_keeps_users_whose_permissions_changed_and_refreshes_them():
    text = 'accounts {{ A {{ users: [ {{ user: u, pass: p, permissions: {{ publish: "{}" }} }} ] }} }}'
    before, after = auth(text.format("a")), auth(text.format("b"))
    identity = before.verify("u", "p", None)
    assert after.still_valid(identity, before)
    refreshed = after.refresh(identity)
    assert refreshed.permissions.publish.allow == ("b",)
    assert before.refresh(identity) is identity


@pytest.mark.parametrize("text,quoted", [
    ("orders.new", '"orders.new"'), ('a"b', '"a\\"b"'), ("a\\b", '"a\\\\b"'),
    ("caf\u00e9", '"caf\u00e9"'), ("a\udcffb", '"a\\xffb"'), ("a\x01", '"a\\x01"'),
])
def test_go_quote(text, quoted):
    assert go_quote(text) == quoted
