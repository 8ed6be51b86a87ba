"""cfn_provider.trust.web_tokens: what makes a usable path token, where tokens come from, which paths they open."""

from __future__ import annotations

import io
import secrets
from pathlib import Path

import pytest
import structlog

from cfn_provider import logs
from cfn_provider.trust.web_tokens import ASYNC, SYNC, TokenError, Tokens, check, new_token, read_tokens, strength


def test_new_tokens_are_strong_url_safe_and_fresh():
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        assert strength(token) >= 256 and check(token, "x") == token


# fixed values: parallel workers must collect the same test ids (a random token in an id differs per worker)
@pytest.mark.parametrize(
    "token, why",
    [
        ("short-token-123", "too weak"),
        ("a" * 64, "too weak"),
        ("6ac3a1f08e7d24b95c0f17e3d2a6b8", "too weak"),
        ("Xq7Lr0vN2kP9sT4wY6zB1cD3fG5hJ8mQ0aE2iU4oR6t/", "URL-safe"),
        ("Xq7Lr0vN2kP9sT4wY6zB1cD3fG5hJ8mQ0aE2iU4oR6t%2F", "URL-safe"),
        ("tökXq7Lr0vN2kP9sT4wY6zB1cD3fG5hJ8mQ0aE2iU4oR6t", "URL-safe"),
    ],
)
def test_unusable_tokens_are_refused_without_being_shown(token: str, why: str):
    with pytest.raises(TokenError, match=why) as exc:
        check(token, "the file")
    assert token not in str(exc.value)


def test_hex_and_base64_of_128_bits_are_enough():
    assert check(h := secrets.token_hex(16), "x") == h
    assert check(b := secrets.token_urlsafe(16), "x") == b


def test_tokens_from_a_file_or_the_environment(tmp_path: Path):
    a, b = new_token(), new_token()
    path = tmp_path / "tokens"
    path.write_text(f"# the current one first\n{a}\n\n  {b}  \n")
    assert read_tokens(str(path), None) == (("default", a), ("default", b))
    assert read_tokens(None, f"{a}, {b}") == (("default", a), ("default", b))
    path.write_text(f"{a}\n{b}\n{new_token()}\n")
    with pytest.raises(TokenError, match="at most 2"):
        read_tokens(str(path), None)
    with pytest.raises(TokenError, match="not both"):
        read_tokens(str(path), a)
    with pytest.raises(TokenError, match="needs a path token"):
        read_tokens(None, None)
    with pytest.raises(TokenError, match="cannot read"):
        read_tokens(str(tmp_path / "missing"), None)
    path.write_text("# nothing yet\n")
    with pytest.raises(TokenError, match="holds no token"):
        read_tokens(str(path), None)


def test_paths_open_exactly_two_modes_for_every_valid_token(tmp_path: Path):
    a, b = new_token(), new_token()
    tokens = Tokens(None, f"{a},{b}")
    for token in (a, b):
        assert tokens.route(f"/{token}").mode == ASYNC and tokens.route(f"/{token}/sync").mode == SYNC
    for path in (
        f"/{a}/",
        f"/{a}/sync/",
        f"//{a}",
        f"/{a}x",
        f"/{a[:-1]}",
        f"/{a}/SYNC",
        f"{a}",
        "/",
        "",
        f"/{a}%00",
        f"/x/{a}",
    ):
        assert tokens.route(path).mode is None, path


def test_reload_reads_the_file_again_and_keeps_the_old_tokens_on_error(tmp_path: Path):
    a, b = new_token(), new_token()
    path = tmp_path / "tokens"
    path.write_text(a)
    tokens = Tokens(str(path))
    path.write_text(f"{b}\n{a}\n")
    assert tokens.reload() == 2 and tokens.route(f"/{b}").mode == ASYNC
    path.write_text("weak")
    with pytest.raises(TokenError):
        tokens.reload()
    assert tokens.tokens == (("default", b), ("default", a))


def test_service_tokens_carry_the_first_token(tmp_path: Path):
    a, b = new_token(), new_token()
    tokens = Tokens(None, f"{a},{b}")
    assert tokens.service_tokens("https://p.example.com:8443/") == [
        f"web[idempotent]:https://p.example.com:8443/{a}",
        f"web[sync,idempotent]:https://p.example.com:8443/{a}/sync",
    ]
    assert tokens.service_tokens("https://p.example.com", idempotent=False)[0] == f"web:https://p.example.com/{a}"


def test_a_token_read_is_redacted_from_every_log_line():
    token = new_token()
    Tokens(None, token)
    stream = io.StringIO()
    logs.configure("json", "info", stream)
    try:
        structlog.get_logger("t").info("oops", path=f"/{token}/sync")
    finally:
        structlog.reset_defaults()
    assert token not in stream.getvalue() and "<redacted>" in stream.getvalue()


def test_named_tokens_are_tenants_and_an_old_bare_token_is_the_default_one(tmp_path: Path):
    old, a1, a2, b = new_token(), new_token(), new_token(), new_token()
    path = tmp_path / "tokens"
    path.write_text(f"{old}\nteam-a {a1}\nteam-a {a2}\n# team b\nteam-b {b}\n")
    tokens = Tokens(str(path))
    assert tokens.route(f"/{old}/sync").tenant == "default"
    assert tokens.route(f"/{a1}").tenant == tokens.route(f"/{a2}/sync").tenant == "team-a"  # rotation: two of a name
    assert tokens.route(f"/{b}").tenant == "team-b" and tokens.route(f"/{b}x").mode is None
    assert tokens.service_tokens("https://p.example.com", tenant="team-b")[0].endswith(f"/{b}")
    assert tokens.tenants() == ["default", "team-a", "team-b"]
    path.write_text(f"team-a {a1}\nteam-a {a2}\nteam-a {new_token()}\n")
    with pytest.raises(TokenError, match="at most 2 of one name"):
        Tokens(str(path))
    for bad in (f"team-a {a1}\nteam-b {a1}\n", f"team/a {a1}\n", f"team-a {a1} extra\n"):
        path.write_text(bad)
        with pytest.raises(TokenError):
            Tokens(str(path))
