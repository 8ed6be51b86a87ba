"""Web tokens are named tenants (issue 28 items 1 and 2), through a real HTTPS client against the real
listener: a tenant's token reaches only its own stacks, its own stored answers and its own handlers;
an old one-token file and old records keep working as the tenant `default`'s, old secrets unchanged."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from cfn_provider.handlers import random_secret as rs
from cfn_provider.pipeline.request import idempotency_key
from cfn_provider.stores import open_store
from cfn_provider.stores.base import new_token as claim_token
from cfn_provider.trust.web_tokens import new_token
from tests.dialects.conftest import ros_request
from tests.support.daemons import in_process_daemons
from tests.support.stub_s3 import StubS3
from tests.support.tls import CertAuthority
from tests.support.web import WEB_HANDLERS, WebDaemon, post, posted, web_settings

SECRET_TYPE = ("Custom::RandomSecret", None)  # the built-in, key-derived here


@pytest.fixture
def server_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    key = os.urandom(32)
    (tmp_path / "secret.key").write_bytes(key)
    monkeypatch.setenv(rs.KEY_ENV, str(tmp_path / "secret.key"))
    # an Update opens an SSM client (used only with a ParameterName, never here): a region, and nowhere to go
    for name, value in {
        "AWS_DEFAULT_REGION": "cn-hangzhou",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "testing",  # no look for credentials (the metadata service)
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    return key


@pytest.fixture
async def tenants_daemon(
    tmp_path: Path, stub_s3: StubS3, ca: CertAuthority, server_key: bytes
) -> AsyncIterator[Callable[..., Any]]:
    """`d = await tenants_daemon("team-a", "team-b", **settings)`: a web daemon whose token file names
    those tenants (None: a bare token, as every file before tenants); `d.tokens[name]`."""
    cert, key = ca.issue(tmp_path / "server")
    async with in_process_daemons() as start_daemon:

        async def start(*names: str | None, **overrides: Any) -> WebDaemon:
            tokens = {name: new_token() for name in names}
            path = tmp_path / "web-token"
            path.write_text("".join(f"{t}\n" if n is None else f"{n} {t}\n" for n, t in tokens.items()))
            settings = web_settings(
                tmp_path,
                stub_s3,
                cert=cert,
                key=key,
                token_file=path,
                **{"handlers": (*WEB_HANDLERS, SECRET_TYPE), **overrides},
            )
            d = WebDaemon(await start_daemon(settings), next(iter(tokens.values())))
            d.tokens = tokens  # type: ignore[attr-defined]
            return d

        yield start


def secret_request(kind: str, url: str, **fields: Any) -> dict[str, Any]:
    return ros_request(kind, url, logical="Db", rtype="Custom::RandomSecret", props={"Length": 30}, **fields)


async def sync(https: aiohttp.ClientSession, d: WebDaemon, tenant: str | None, body: dict[str, Any]) -> Any:
    status, _, raw = await post(https, d.url("sync", d.tokens[tenant]), body)  # type: ignore[attr-defined]
    return status, raw


async def test_a_tenant_naming_another_tenants_stack_is_refused_and_learns_nothing(
    tenants_daemon, https, stub_s3: StubS3
):
    d = await tenants_daemon("team-a", "team-b")
    created = secret_request("Create", stub_s3.url("a/create"))
    status, raw = await sync(https, d, "team-a", created)
    answer = json.loads(raw)
    assert status == 200 and answer["Status"] == "SUCCESS", answer
    secret, physical_id = answer["Data"]["Secret"], answer["PhysicalResourceId"]
    victim = {k: created[k] for k in ("StackId", "StackName", "LogicalResourceId")}

    attacks = {
        "a fresh RequestId with the victim's ids (Update)": secret_request(
            "Update", stub_s3.url("b/update"), physical_id=physical_id, old_props={"Length": 30}
        )
        | victim,
        "a fresh Create in the victim's stack": secret_request("Create", stub_s3.url("b/create")) | victim,
        "the victim's known RequestId": created,
    }
    with capture_logs() as logs:
        for name, body in attacks.items():
            status, raw = await sync(https, d, "team-b", body)
            assert status == 403 and secret not in raw.decode(), (name, status, raw)
            assert "another principal" in json.loads(raw)["Error"], name
        status, _, raw = await post(
            https, d.url("async", d.tokens["team-b"]), attacks["a fresh Create in the victim's stack"]
        )
        assert status == 403 and secret not in raw.decode()
    assert not [e for e in logs if e.get("event") == "request" and "/a/create" not in e["response_url"]]  # none ran
    assert len([e for e in logs if e.get("event") == "security"]) == len(attacks) + 1
    assert not stub_s3.requests  # nothing answered anywhere
    again = secret_request("Update", stub_s3.url("a/update"), physical_id=physical_id, old_props={"Length": 30})
    status, raw = await sync(https, d, "team-a", again | victim)  # the owner is served as before
    assert status == 200 and json.loads(raw)["Data"]["Secret"] == secret


async def test_the_same_ids_under_two_tenants_derive_two_secrets(tenants_daemon, https, stub_s3: StubS3):
    """Per-stack state belongs to its principal: team-b's stack never derives team-a's values, even with
    every id alike (the derivation input carries the principal)."""
    d = await tenants_daemon("team-a", "team-b")
    a = secret_request("Create", stub_s3.url("a"))
    status, raw = await sync(https, d, "team-a", a)
    a_answer = json.loads(raw)
    b = secret_request("Create", stub_s3.url("b"))  # its own stack, the same logical id
    status, raw = await sync(https, d, "team-b", b)
    b_answer = json.loads(raw)
    assert status == 200 and b_answer["Status"] == "SUCCESS"
    forged = b_answer["PhysicalResourceId"]  # team-b's own id, presented back under its own stack: served
    update = secret_request("Update", stub_s3.url("b2"), physical_id=forged, old_props={"Length": 30})
    status, raw = await sync(https, d, "team-b", update | {k: b[k] for k in ("StackId", "LogicalResourceId")})
    assert json.loads(raw)["Data"]["Secret"] == b_answer["Data"]["Secret"] != a_answer["Data"]["Secret"]


async def test_a_tenant_gets_only_the_handlers_it_was_given(tenants_daemon, https, stub_s3: StubS3):
    d = await tenants_daemon(
        "team-a", "team-b", tenant_handlers=("team-a=Custom::Test", "team-a=Custom::Random*", "team-b=Custom::Stamped")
    )
    status, raw = await sync(https, d, "team-b", ros_request("Create", stub_s3.url("b/test")))
    doc = json.loads(raw)
    assert status == 200 and doc["Status"] == "FAILED" and doc["Reason"] == "no handler for Custom::Test"
    status, raw = await sync(https, d, "team-b", secret_request("Create", stub_s3.url("b/secret")))
    assert json.loads(raw)["Reason"] == "no handler for Custom::RandomSecret"
    status, raw = await sync(https, d, "team-b", ros_request("Create", stub_s3.url("b/own"), rtype="Custom::Stamped"))
    assert json.loads(raw)["Status"] == "SUCCESS"
    for body in (ros_request("Create", stub_s3.url("a/test")), secret_request("Create", stub_s3.url("a/secret"))):
        status, raw = await sync(https, d, "team-a", body)
        assert json.loads(raw)["Status"] == "SUCCESS", raw
    status, raw = await sync(https, d, "team-a", ros_request("Create", stub_s3.url("a/s"), rtype="Custom::Stamped"))
    assert json.loads(raw)["Reason"] == "no handler for Custom::Stamped"


def v1_secret(key: bytes, physical_id: str, length: int) -> str:
    """RandomSecret's derivation as every release before principals wrote it (its values must not change)."""
    alphabet, out, counter = rs.DEFAULT_ALPHABET, [], 0
    label = f"cfn-provider/random-secret/v1\0{physical_id}\0{length}\0{alphabet}".encode()
    while len(out) < length:
        block = hmac.new(key, label + counter.to_bytes(8, "big"), hashlib.sha256).digest()
        counter += 1
        out.extend(alphabet[b % len(alphabet)] for b in block if b < 256 - 256 % len(alphabet))
    return "".join(out[:length])


async def test_an_old_one_token_file_and_old_records_are_the_default_tenants(
    tenants_daemon, https, stub_s3: StubS3, tmp_path: Path, server_key: bytes
):
    # a record as an earlier release stored it (its key without a principal), answered SENT
    stack_id, request_id = str(uuid.uuid4()), str(uuid.uuid4()).upper()
    stored = json.dumps({"Status": "SUCCESS", "StackId": stack_id, "RequestId": request_id, "Data": {"V": "old"}})
    store = open_store(f"sqlite://{tmp_path}/state.db")
    try:
        key, token = idempotency_key(stack_id, request_id), claim_token()
        assert (await store.claim(key, "old-release", "digest", 60, token=token)).acquired
        assert await store.save_response(key, token, "SUCCESS", stored.encode())
        await store.mark_sent(key, "digest", token)
    finally:
        await store.close()
    d = await tenants_daemon(None, "team-b")  # the old bare line, and a tenant added beside it
    old = ros_request("Create", stub_s3.url("old"), stack_id=stack_id, request_id=request_id)
    status, raw = await sync(https, d, None, old)
    assert (status, raw.decode()) == (200, stored)  # the default tenant's: replayed, not re-run
    status, raw = await sync(https, d, "team-b", old)
    assert status == 403 and b"old" not in raw  # never to another tenant

    created = secret_request("Create", stub_s3.url("s"))
    status, raw = await sync(https, d, None, created)
    answer = json.loads(raw)
    assert answer["Data"]["Secret"] == v1_secret(server_key, answer["PhysicalResourceId"], 30)  # unchanged


async def test_a_named_tenants_async_request_is_run_and_answered_under_its_own_key(
    tenants_daemon, https, stub_s3: StubS3, tmp_path: Path
):
    """The poll scheduler runs an accepted request from the store: the stored request keeps its
    principal, so the run finds its own record (keys of a named tenant carry its name)."""
    d = await tenants_daemon("team-a")
    req = ros_request("Create", stub_s3.url("a/async"), props={"Size": "3"})
    status, _, body = await post(https, d.url("async", d.tokens["team-a"]), req)  # type: ignore[attr-defined]
    assert (status, json.loads(body)) == (200, {"Accepted": True})
    answer = json.loads((await posted(stub_s3, "a/async")).body)
    assert answer["Status"] == "SUCCESS" and answer["RequestId"] == req["RequestId"]
    store = open_store(f"sqlite://{tmp_path}/state.db")
    try:
        assert await store.get(idempotency_key(req["StackId"], req["RequestId"])) is None  # not default's
        record = await store.get(idempotency_key(req["StackId"], req["RequestId"], "team-a"))
        assert record is not None and record.status == "SUCCESS"
    finally:
        await store.close()
