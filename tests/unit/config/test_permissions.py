"""Permissions in the configuration: the forms, aliases and defaults nats-server
server/opts.go reads (parseUserPermissions, parseVariablePermissions,
parseSubjectPermission, parseAllowResponses), where default permissions apply
(applyDefaultPermissions), and the errors for what it refuses."""

from __future__ import annotations

import pytest

from jetraft.config import (
    ConfigError,
    Permissions,
    ResponsePermission,
    ServerConfig,
    SubjectPermission,
    config_from_text,
)
from jetraft.config.permissions import is_valid_permission_subject


def cfg(text: str) -> ServerConfig:
    return config_from_text(text, "s.conf")


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        cfg(text)
    return e.value


def user_perms(permissions: str) -> Permissions | None:
    """The permissions of one user in account A written with ``permissions``."""
    config = cfg(f"accounts {{ A {{ users: [ {{ user: u, pass: p, permissions: {permissions} }} ] }} }}")
    return config.accounts["A"].users[0].permissions


def users(config: ServerConfig) -> dict[str, Permissions | None]:
    return {u.user: u.permissions for u in config.all_users()}


# -- forms and aliases ------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ('{ publish: "a.>" }', Permissions(publish=SubjectPermission(allow=("a.>",)))),
    ('{ pub: ["a", "b.*"] }', Permissions(publish=SubjectPermission(allow=("a", "b.*")))),
    ('{ import: { allow: "x" } }', Permissions(publish=SubjectPermission(allow=("x",)))),
    ('{ publish: { deny: [">"] } }', Permissions(publish=SubjectPermission(deny=(">",)))),
    ('{ publish: { allow: [] } }', Permissions(publish=SubjectPermission(allow=()))),
    ('{ publish: {} }', Permissions()),
    ('{ subscribe: "public.>" }', Permissions(subscribe=SubjectPermission(allow=("public.>",)))),
    ('{ sub: { allow: ["jobs.* workers"], deny: "jobs.x" } }',
     Permissions(subscribe=SubjectPermission(allow=("jobs.* workers",), deny=("jobs.x",)))),
    ('{ export: "e" }', Permissions(subscribe=SubjectPermission(allow=("e",)))),
    ('{ PUBLISH: { ALLOW: "a" } }', Permissions(publish=SubjectPermission(allow=("a",)))),
])
def test_permission_forms(text, expected):
    assert user_perms(text) == expected


def test_user_permission_key_aliases():
    for key in ("permission", "permissions", "authorization"):
        perms = cfg(f"authorization {{ users: [ {{ user: u, {key}: {{ publish: x }} }} ] }}").all_users()[0].permissions
        assert perms == Permissions(publish=SubjectPermission(allow=("x",)))


@pytest.mark.parametrize("text,expected", [
    ("true", ResponsePermission(1, 120.0)),
    ("{ max: 5, expires: \"1m\" }", ResponsePermission(5, 60.0)),
    ("{ max_msgs: -1, ttl: \"-1s\" }", ResponsePermission(-1, -1.0)),
    ("{ max: 0, expires: \"0s\" }", ResponsePermission(1, 120.0)),        # 0: the default
    ("{ max_responses: 3 }", ResponsePermission(3, 120.0)),
])
def test_allow_responses(text, expected):
    perms = user_perms(f"{{ subscribe: svc, allow_responses: {text} }}")
    assert perms.allow_responses == expected
    # auth.go validateResponsePermissions: the blanket publish allow is off
    assert perms.publish == SubjectPermission(allow=())


def test_allow_responses_alias_false_and_existing_allow():
    assert user_perms("{ publish_allow_responses: false }") == Permissions()
    perms = user_perms('{ publish: { allow: "a", deny: "b" }, allow_responses: true }')
    assert perms.publish == SubjectPermission(allow=("a",), deny=("b",))
    perms = user_perms('{ allow_responses: true, publish: { deny: "b" } }')
    assert perms.publish == SubjectPermission(allow=(), deny=("b",))


# -- where default permissions apply ----------------------------------------------------------


def test_authorization_default_permissions_go_to_its_users_without_their_own():
    for key in ("default_permissions", "default_permission", "permissions"):
        config = cfg(f"""authorization {{
  {key}: {{ publish: "d" }}
  users: [ {{ user: a }}, {{ user: b, permissions: {{ publish: "own" }} }} ]
}}""")
        assert users(config) == {"a": Permissions(publish=SubjectPermission(allow=("d",))),
                                 "b": Permissions(publish=SubjectPermission(allow=("own",)))}
        assert config.authorization.default_permissions == Permissions(publish=SubjectPermission(allow=("d",)))


def test_default_permissions_after_users_apply_too():
    config = cfg('authorization { users: [ { user: a } ], default_permissions: { sub: "s" } }')
    assert users(config)["a"] == Permissions(subscribe=SubjectPermission(allow=("s",)))


def test_account_default_permissions_go_to_the_account_users_only():
    """nats-server: account users get their account's defaults, never the authorization
    block's; authorization users get the block's."""
    config = cfg("""
authorization { default_permissions: { publish: top } }
accounts {
  A { users: [ { user: a1 }, { user: a2, permissions: { publish: own } } ], default_permissions: { publish: acc } }
  B { users: [ { user: b1 } ] }
}
""")
    assert users(config) == {
        "a1": Permissions(publish=SubjectPermission(allow=("acc",))),
        "a2": Permissions(publish=SubjectPermission(allow=("own",))),
        "b1": None,
    }
    assert config.accounts["A"].default_permissions == Permissions(publish=SubjectPermission(allow=("acc",)))


def test_no_permissions_means_none():
    assert users(cfg("accounts { A { users: [ { user: a, pass: p } ] } }")) == {"a": None}


def test_permissions_are_no_longer_warnings():
    config = cfg('authorization { permissions: { publish: x }, users: [ { user: u, permissions: { sub: y } } ] }')
    assert config.warnings == ()


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("permissions,message", [
    ('{ publish: "foo bar" }', 'permissions.publish: subject "foo bar" is not a valid subject'),
    ('{ publish: ["ok", "a..b"] }', 'permissions.publish[1]: subject "a..b" is not a valid subject'),
    ('{ publish: { deny: "a.>.b" } }', 'permissions.publish.deny: subject "a.>.b" is not a valid subject'),
    ('{ publish: "a q" }', 'permissions.publish: subject "a q" is not a valid subject'),  # no queue
    ('{ subscribe: "a b c" }', 'permissions.subscribe: subject "a b c" is not a valid subject'),
    ('{ subscribe: "a. q" }', 'permissions.subscribe: subject "a." is not a valid subject'),
    ('{ subscribe: { allow: "a q." } }', 'permissions.subscribe.allow: queue "q." is not a valid queue'),
    ('{ subscribe: "" }', 'permissions.subscribe: subject "" is not a valid subject'),
    ("{ publish: 1 }", "permissions.publish: expected a subject or an array of subjects, got an integer"),
    ("{ publish: [1] }", "permissions.publish[0]: a subject in permissions must be a string, got an integer"),
    ("{ publish: { allow: a, only: b } }", "unknown field 'only' parsing subject permissions"),
    ("{ colour: red }", "permissions.colour: unknown field 'colour' parsing permissions"),
    ('{ allow_responses: "yes" }', "expected a boolean or a map"),
    ("{ allow_responses: { max: \"1\" } }", "permissions.allow_responses.max: expected an integer, got a string"),
    ("{ allow_responses: { expires: 5 } }", "error parsing expires, not a duration string"),
    ("{ allow_responses: { expires: \"5 parsecs\" } }", "error parsing expires: unknown unit"),
    ("{ allow_responses: { size: 1 } }", "unknown field 'size' parsing permissions"),
    ("[ a ]", "expected permissions to be a map, got an array"),
])
def test_invalid_permissions_are_errors_at_their_position(permissions, message):
    e = error(f"accounts {{\n  A {{ users: [ {{ user: u, permissions: {permissions} }} ] }}\n}}")
    assert message in e.message
    assert (e.file, e.line) == ("s.conf", 2)
    assert e.column > 20


def test_errors_in_default_permissions():
    assert 'subject "a b" is not a valid subject' in error('authorization { default_permissions: { pub: "a b" } }').message
    e = error('accounts { A { default_permissions: { sub: "x y z" } } }')
    assert e.message.startswith("accounts.A.default_permissions.sub:")


@pytest.mark.parametrize("subject,valid", [
    ("a", True), ("a.b.c", True), ("*", True), (">", True), ("a.*.c", True), ("a.>", True), ("a*b", True),
    ("", False), ("a..b", False), (".a", False), ("a.", False), ("a.>.b", False), ("a b", False), ("a\tb", False),
])
def test_subject_validity_is_nats_servers(subject, valid):
    assert is_valid_permission_subject(subject) is valid
