"""Chaos suite 6: redaction. Nothing secret reaches the daemon's output, whatever is logged.

A real daemon subprocess (`python -m cfn_provider run --log-format json --log-level debug`, stdout and
stderr both captured to one file) with AWS_SECRET_ACCESS_KEY set to a distinctive value (the
emulator accepts any) serves, through the real SNS -> SQS path:
- a full Create / Update / Delete lifecycle of Custom::Secret (tests.support.noecho_handler),
  whose Create and Update return distinctive secrets as NoEcho Data; the Create handler also
  logs the secret access key and its ResponseURL (a careless handler, through structlog and
  through a standard-library logger);
- a request whose handler makes a standard-library log call with a broken format string and
  the ResponseURL and secret key as arguments (`logging` reports such errors itself, on
  stderr, outside any formatter);
- a request whose handler raises with the full ResponseURL (signature included) in the
  exception message, so it lands in a traceback and in the FAILED Reason;
- a request whose allowed ResponseURL (presigned for a ConnectionCounter, expiring in a few
  seconds) cannot be reached, so the responder logs retries with aiohttp's error text (which
  quotes the URL) and then gives up;
- a request whose ResponseURL is outside the allowlist (a security event naming the URL).
ResponseURLs are presigned both with SigV4 (X-Amz-Signature=) and SigV2 (Signature=, botocore's
default for presigned S3 URLs, so the Stack helper's own URLs are SigV2).

Then every byte the daemon wrote is searched for: each NoEcho Data value, each presigned
signature (as written in the URL and URL-decoded, and its first 16 characters), and the
secret access key. None may appear. The test also checks that the risky lines were really
written (so a silent daemon cannot pass) and that the secrets really went where they belong
(the NoEcho Data in the response CloudFormation reads).
"""

from __future__ import annotations

import json
import secrets
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import boto3
from botocore.config import Config

from cfn_provider.local.emulator import REGION, TEST_CREDENTIALS, Emulator, Provider, Stack
from tests.chaos.conftest import Figures, scale
from tests.support.daemons import SubprocessDaemon, wait_until
from tests.support.listener import ConnectionCounter
from tests.support.noecho_handler import DATA_KEYS, secret

UNREACHABLE_EXPIRES = scale(3, 6)  # seconds the unreachable ResponseURL stays valid (retried until then)


def presigner(endpoint: str, signature_version: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=Config(signature_version=signature_version, s3={"addressing_style": "path"}),
    )


def presign(client: Any, bucket: str, key: str, expires: int = 3600) -> str:
    return client.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires)


def signatures_in(url: str) -> list[str]:
    """The signature values of a presigned URL, as written in it and URL-decoded."""
    query = urlsplit(url).query
    found = []
    for part in query.split("&"):
        name, _, raw = part.partition("=")
        if name.lower() in ("x-amz-signature", "signature") and raw:
            found.append(raw)
    found += [v for k, v in parse_qsl(query) if k.lower() in ("x-amz-signature", "signature")]
    assert found, f"no signature in {url}"
    return found


def test_no_secret_reaches_the_logs(
    emulator: Emulator, provider: Provider, stack: Stack, tmp_path: Path, figures: Figures
) -> None:
    began = time.monotonic()
    figures.set("secrets_found", "not measured")  # replaced below once the output is read
    secret_key = f"wJalr/{secrets.token_hex(12)}+{secrets.token_hex(8)}"  # shaped like an AWS secret key
    noecho_seed = f"NoEchoSeed{secrets.token_hex(10)}"
    sigv2, sigv4 = presigner(emulator.endpoint, "s3"), presigner(emulator.endpoint, "s3v4")

    with ConnectionCounter() as counter:
        log_path = tmp_path / "daemon.log"
        daemon = SubprocessDaemon.for_provider(
            emulator,
            provider,
            tmp_path,
            log_path,
            extra_args=[
                "--handler",
                "Custom::Secret=tests.support.noecho_handler",
                "--log-level",
                "debug",
                "--allow-response-url",
                counter.url("/"),
            ],
            env={"AWS_SECRET_ACCESS_KEY": secret_key, "CFN_TEST_NOECHO_SECRET": noecho_seed},
        )
        urls: list[str] = []
        try:
            daemon.start()

            # -- lifecycle with NoEcho Data: Create (SigV4 URL), Update (SigV2 URL), Delete (SigV4 URL)
            create = stack.request("Create", "Db", resource_type="Custom::Secret", properties={"LogSecretKey": "yes"})
            create["ResponseURL"] = presign(sigv4, provider.bucket, f"{stack.name}/Db/create-{create['RequestId']}")
            stack.publish(create)
            created = stack.response(create, 30)
            update = stack.request(
                "Update",
                "Db",
                resource_type="Custom::Secret",
                physical_id="secret-Db",
                properties={"Size": "2"},
                old_properties={"Size": "1"},
            )
            update["ResponseURL"] = presign(sigv2, provider.bucket, f"{stack.name}/Db/update-{update['RequestId']}")
            stack.publish(update)
            updated = stack.response(update, 30)
            delete = stack.request("Delete", "Db", resource_type="Custom::Secret", physical_id="secret-Db")
            delete["ResponseURL"] = presign(sigv4, provider.bucket, f"{stack.name}/Db/delete-{delete['RequestId']}")
            stack.publish(delete)
            deleted = stack.response(delete, 30)

            # -- a handler that raises with the ResponseURL in its message (SigV2 and SigV4)
            broken = stack.request("Create", "Broken", resource_type="Custom::Secret", properties={"Fail": "quote-url"})
            broken["ResponseURL"] = presign(sigv4, provider.bucket, f"{stack.name}/Broken/{broken['RequestId']}")
            stack.publish(broken)
            failed = stack.response(broken, 30)
            broken2 = stack.request(
                "Create", "Broken2", resource_type="Custom::Secret", properties={"Fail": "quote-url"}
            )
            broken2["ResponseURL"] = presign(sigv2, provider.bucket, f"{stack.name}/Broken2/{broken2['RequestId']}")
            stack.publish(broken2)
            failed2 = stack.response(broken2, 30)

            # -- a library log call with a broken format string, its arguments secret
            careless = stack.request(
                "Create", "Careless", resource_type="Custom::Secret", properties={"LogBadFormat": "yes"}
            )
            stack.publish(careless)
            careless_answer = stack.response(careless, 30)

            # -- an allowed ResponseURL that cannot be reached: retries quote aiohttp's errors
            unreachable = stack.request("Create", "Unreachable", resource_type="Custom::Secret")
            unreachable["ResponseURL"] = presign(
                presigner(counter.url("").rstrip("/"), "s3v4"),
                "bucket",
                f"unreachable/{unreachable['RequestId']}",
                UNREACHABLE_EXPIRES,
            )
            stack.publish(unreachable)

            # -- a ResponseURL outside the allowlist: a security event that names the URL
            outside = stack.request("Create", "Outside", resource_type="Custom::Secret")
            outside["ResponseURL"] = (
                f"https://evil.example/{stack.name}/k?X-Amz-Signature={secrets.token_hex(32)}"
                f"&Signature={quote(secrets.token_urlsafe(20))}"
            )
            stack.publish(outside)

            wait_until(
                lambda: any(
                    e.get("event") == "request" and e.get("logical_id") == "Unreachable" for e in daemon.events()
                ),
                30 + UNREACHABLE_EXPIRES,
                "the unreachable request",
            )
            wait_until(lambda: any(e.get("event") == "security" for e in daemon.events()), 30, "the security event")
            urls = [r["ResponseURL"] for r in (create, update, delete, broken, broken2, careless, unreachable, outside)]
        finally:
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.signal(signal.SIGTERM)
                try:
                    daemon.wait(60)
                except Exception:  # noqa: BLE001 - still stop it below
                    pass
            daemon.stop()

    output = log_path.read_bytes()
    text = output.decode("utf-8", "replace")
    lines = text.splitlines()

    # The secrets went where they belong: CloudFormation's response carries the NoEcho Data.
    assert created and created["Status"] == "SUCCESS" and created.get("NoEcho") is True, created
    assert created["Data"] == {k: secret("Create", k, noecho_seed) for k in DATA_KEYS}
    assert updated and updated["Status"] == "SUCCESS" and updated.get("NoEcho") is True, updated
    assert updated["Data"] == {k: secret("Update", k, noecho_seed) for k in DATA_KEYS}
    assert deleted and deleted["Status"] == "SUCCESS"
    assert failed and failed["Status"] == "FAILED" and broken["ResponseURL"] in failed["Reason"]
    assert failed2 and failed2["Status"] == "FAILED" and "Signature=" in failed2["Reason"]
    assert careless_answer and careless_answer["Status"] == "SUCCESS"

    # The risky lines were really written (redacted), so a silent daemon cannot pass.
    events = [json.loads(line) for line in lines if line.startswith("{")]
    names = [e.get("event") for e in events]
    for expected in ("handler.credentials", "handler.raised", "response.retry", "response.undeliverable", "security"):
        assert expected in names, f"no {expected} line in the daemon's output"
    assert any("using secret" in line for line in lines), "the standard-library logger's line is missing"
    assert any("<redacted>" in line for line in lines)
    assert "Traceback" in text  # the handler's exception, with its message quoting the URL

    # (secret, form searched): each secret is also searched by its first 16 characters
    secrets_by_name: dict[str, list[str]] = {"AWS_SECRET_ACCESS_KEY": [secret_key]}
    for kind in ("Create", "Update"):
        for key in DATA_KEYS:
            secrets_by_name[f"NoEcho Data {kind}.{key}"] = [secret(kind, key, noecho_seed)]
    for url in urls:
        forms = signatures_in(url)  # as written in the URL, then URL-decoded
        secrets_by_name[f"signature {forms[0][:8]}... of {urlsplit(url).path[-20:]}"] = forms
    found: dict[str, list[str]] = {}
    for name, forms in secrets_by_name.items():
        hits = [f for f in dict.fromkeys(forms + [f[:16] for f in forms]) if f in text]
        if hits:
            found[name] = [line[:300] for line in lines if any(h in line for h in hits)][:2]

    figures.set("log_lines", len(lines))
    figures.set("log_bytes", len(output))
    figures.set("secrets_searched", len(secrets_by_name))
    figures.set("lines_redacted", sum("<redacted>" in line for line in lines))
    figures.set("secrets_found", len(found))
    figures.set(
        "lines_with_a_secret",
        sum(any(f in line for forms in secrets_by_name.values() for f in forms) for line in lines),
    )
    figures.set("seconds", round(time.monotonic() - began, 1))
    assert not found, "secrets in the daemon's output:\n" + "\n".join(
        f"- {name}: {shown}" for name, shown in found.items()
    )
