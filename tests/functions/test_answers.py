"""cfn_provider.functions.answers and .tls: the loopback listener a function answers to, over HTTPS
with a CA only the daemon holds the key of, and trusted by the functions' usual HTTP clients."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys

import pytest
from structlog.testing import capture_logs

from cfn_provider.functions import tls
from cfn_provider.functions.answers import Answers, parse


@pytest.fixture
async def answers():
    made = tls.make()
    listener = Answers(made)
    await listener.start()
    yield listener
    await listener.stop()
    made.close()


async def put(url: str, body: bytes, cafile: str, method: str = "PUT") -> int:
    """A PUT from another process, trusting only what SSL_CERT_FILE names (as a function does)."""
    return await asyncio.to_thread(_put, url, body, cafile, method)


def _put(url: str, body: bytes, cafile: str, method: str) -> int:
    code = (
        "import sys, urllib.request, urllib.error\n"
        "try:\n"
        f"    print(urllib.request.urlopen(urllib.request.Request({url!r}, data={body!r}, method={method!r})).status)\n"
        "except urllib.error.HTTPError as exc:\n"
        "    print(exc.code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"SSL_CERT_FILE": cafile, "PATH": os.environ.get("PATH", "")},
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


def test_bodies_read_as_cloudformation_would():
    answer = parse(
        json.dumps({"Status": "SUCCESS", "PhysicalResourceId": "p", "Data": {"A": 1}, "NoEcho": True}).encode()
    )
    assert (answer.status, answer.physical_id, answer.data, answer.no_echo, answer.problem) == (
        "SUCCESS",
        "p",
        {"A": 1},
        True,
        None,
    )
    assert parse(b"\xff").problem == "the function's response body is not JSON"
    assert parse(b"[1]").problem == "the function's response body is a JSON list, not an object"
    assert parse(b'{"Status": "FAILED", "NoEcho": "false"}').no_echo is False


async def test_the_first_answer_counts_and_the_url_dies_with_the_call(answers, tmp_path):
    cafile = answers.tls.bundle(None, "ca-only.pem")
    capture = answers.open({"request_id": "r1"})
    with capture_logs() as logs:
        assert await put(capture.url, b'{"Status": "SUCCESS"}', cafile) == 200
        assert await put(capture.url, b'{"Status": "FAILED"}', cafile, method="POST") == 200
        answers.close(capture)
        assert await put(capture.url, b'{"Status": "FAILED"}', cafile) == 403
        assert await put(capture.url.replace("token=", "token=x"), b"{}", cafile) == 403
    assert capture.answer is not None and capture.answer.status == "SUCCESS"
    assert [e["event"] for e in logs] == ["lambda.sent", "lambda.second_send", "lambda.late_send"]
    assert all(e["request_id"] == "r1" for e in logs)


async def test_the_listener_is_https_on_loopback_with_a_certificate_for_127_0_0_1(answers):
    capture = answers.open({})
    assert capture.url.startswith(f"https://127.0.0.1:{answers.port}/response?token=")

    def handshake(context: ssl.SSLContext) -> str | None:
        with socket.create_connection(("127.0.0.1", answers.port), timeout=10) as sock:
            with context.wrap_socket(sock, server_hostname="127.0.0.1") as wrapped:
                return wrapped.version()

    with pytest.raises(ssl.SSLCertVerificationError):  # the system's trust alone: the CA is in no store
        await asyncio.to_thread(handshake, ssl.create_default_context())
    assert await asyncio.to_thread(handshake, ssl.create_default_context(cafile=answers.tls.bundle(None, "ca.pem")))


def test_the_trust_bundles_keep_what_was_trusted_before(tmp_path):
    made = tls.make()
    try:
        base = tmp_path / "operator-ca.pem"
        base.write_bytes(b"-----BEGIN CERTIFICATE-----\nOPERATOR\n-----END CERTIFICATE-----\n")
        env = made.trust_environment({"SSL_CERT_FILE": str(base), "REQUESTS_CA_BUNDLE": str(base)})
        for key in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
            text = open(env[key], "rb").read()
            assert text.startswith(base.read_bytes().rstrip()) and text.endswith(made.ca_pem)
        assert b"PRIVATE KEY" not in b"".join(p.read_bytes() for p in made.folder.iterdir())
        assert oct(made.folder.stat().st_mode & 0o777) == "0o700"
    finally:
        made.close()
    assert not made.folder.exists()
