"""Chaos suite 5: property-based fuzzing of what parses and answers untrusted input.

Targets (all pure, or talking only to a CertServer on 127.0.0.1):
- `cfn_provider.pipeline.envelope.unwrap` on arbitrary text, arbitrary JSON, and mutated real envelopes
  (signed by tests.support.sns_signing): only `BadMessage` may escape; what it accepts is a
  usable Envelope (text message, aware timestamp, a TopicArn unless raw).
- `cfn_provider.pipeline.request.parse` on arbitrary text, arbitrary JSON documents and mutated valid
  requests (fields dropped, retyped, huge, unicode, lone surrogates, deep nesting): only
  `NotARequest` may escape; every property of an accepted Request can be read; and what the
  worker then builds from it with `cfn_provider.pipeline.response.success` / `failure` (for arbitrary handler
  results and reasons, and the worker's own "invalid request" / "no handler" answers) is at
  most 4096 bytes of strict UTF-8 JSON with StackId, RequestId and LogicalResourceId copied
  verbatim.
- `cfn_provider.trust.signature.SignatureVerifier.verify` on mutated signed envelopes: only
  `SignatureError` / `CertificateUnavailable` may escape, and nothing whose signed fields
  differ from what was signed is ever accepted.

tests/pipeline/test_response.py already has properties of the response builder over requests
made within every limit; here the requests come out of `parse` from hostile text.

A failing example does not stop the run: each target records every failure (exception type,
shortest input) and fails at the end, so the figures show how many of the examples failed.
Sizes: `max_examples = scale(200, 3000)` per target, no deadline.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cfn_provider.pipeline.envelope import BadMessage, Envelope, unwrap
from cfn_provider.pipeline.request import NotARequest, Request, is_utf8, json_size, parse
from cfn_provider.pipeline.response import MAX_BODY, Response, failure, success
from cfn_provider.trust.signature import CertificateUnavailable, SignatureError, SignatureVerifier, string_to_sign
from tests.chaos.conftest import Figures, scale
from tests.support.sns_signing import CertServer, make_identity, notification, sign_envelope

EXAMPLES = scale(200, 3000)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
)
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TOPIC = "arn:aws:sns:us-east-1:123456789012:cfn-provider"
STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/fuzz/5b918d10-cd98-11ea-90d5-0a9cd3354c10"
IDENTITY = make_identity()

# -- strategies ----------------------------------------------------------------------------------
LONE_SURROGATES = ["\ud800", "\udbff", "\udc00", "\udcff", "\udfff", "\ud83d"]
INTERESTING = [
    "",
    " ",
    "\x00",
    "\n",
    "é",
    "😀",
    "\u202e",
    "\ufeff",
    "\ufffd",
    "\uffff",
    "Ã©",
    "\x85",
    "null",
    "[]",
    "{}",
    "Notification",
    "SubscriptionConfirmation",
    "UnsubscribeConfirmation",
    "Create",
    "Update",
    "Delete",
    "Destroy",
    "Custom::Test",
    "2026-01-01T00:00:00.000Z",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    "2026-13-01T00:00:00Z",
    "1714564800",
    "https://bucket.s3.amazonaws.com/k?X-Amz-Signature=abc",
    "http://169.254.169.254/latest/meta-data/",
    "arn:aws:cloudformation:us-east-1:1:stack/a/b",
    TOPIC,
    *LONE_SURROGATES,
]
ANY_CHAR = st.characters(exclude_categories=())  # surrogates included
TEXT = st.one_of(
    st.text(max_size=40),
    st.text(ANY_CHAR, max_size=20),
    st.sampled_from(INTERESTING),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=8), st.sampled_from(LONE_SURROGATES), st.text(max_size=8)),
    st.builds(
        lambda c, n: c * n,
        st.sampled_from(["a", "é", "😀", '"', "\\", "\x01", "\udcff"]),
        st.sampled_from([255, 256, 257, 1023, 1024, 1025, 4096, 5000, 9000]),
    ),
)
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**63, 1e308, -0.0]),
)
JSON = st.recursive(
    st.none() | st.booleans() | NUMBERS | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=8,
)
DEPTHS = st.one_of(st.sampled_from([1, 10, 100, 300, 450, 600, 900, 999, 1000, 1500, 3000]), st.integers(0, 3000))


def _dumps(value: Any, ascii_only: bool = True) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)  # NaN/Infinity allowed: Python's json reads them back


@st.composite
def text_edits(draw: st.DrawFn, text: str) -> str:
    """A few character-level edits: deletions, insertions, duplications, truncation."""
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "truncate"]))
        if op == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 8)) :]
        elif op == "insert":
            text = (
                text[:at]
                + draw(
                    st.sampled_from(
                        [
                            '"',
                            "\\",
                            "{",
                            "}",
                            "[",
                            "]",
                            ",",
                            ":",
                            "\\ud800",
                            "\\u0000",
                            "NaN",
                            "1e999",
                            "9" * 5000,
                            "😀",
                        ]
                    )
                )
                + text[at:]
            )
        elif op == "duplicate":
            end = min(len(text), at + draw(st.integers(1, 40)))
            text = text[:end] + text[at:end] + text[end:]
        else:
            text = text[:at]
    return text


def valid_request(kind: str = "Create") -> dict[str, Any]:
    req = {
        "RequestType": kind,
        "ServiceToken": TOPIC,
        "ResponseURL": "https://bucket.s3.amazonaws.com/key?X-Amz-Signature=abc",
        "StackId": STACK_ID,
        "RequestId": "0c6bb5b3-4b10-4c3f-9a51-1f0b2b6f6f51",
        "LogicalResourceId": "Thing",
        "ResourceType": "Custom::Test",
        "ResourceProperties": {"ServiceToken": TOPIC, "Colour": "blue"},
    }
    if kind in ("Update", "Delete"):
        req["PhysicalResourceId"] = "thing-1"
    if kind == "Update":
        req["OldResourceProperties"] = {"ServiceToken": TOPIC, "Colour": "red"}
    return req


REQUEST_KEYS = list(valid_request("Update")) + ["Extra"]


@st.composite
def mutated_requests(draw: st.DrawFn) -> str:
    """A valid request's JSON with some fields dropped, replaced, oversized or nested deeply."""
    req = valid_request(draw(st.sampled_from(["Create", "Update", "Delete"])))
    for key in draw(st.lists(st.sampled_from(REQUEST_KEYS), max_size=4, unique=True)):
        action = draw(st.sampled_from(["drop", "json", "text", "text"]))
        if action == "drop":
            req.pop(key, None)
        else:
            req[key] = draw(JSON if action == "json" else TEXT)
    text = _dumps(req, draw(st.booleans()))
    if draw(st.integers(0, 3)) == 0:  # properties nested deeper than a dict-built test could go
        depth = draw(DEPTHS)
        nested = draw(st.sampled_from(['{"a":' * depth + "1" + "}" * depth, "[" * depth + "]" * depth]))
        text = text[:-1] + ', "ResourceProperties": ' + nested + "}"
    if draw(st.integers(0, 4)) == 0:
        text = draw(text_edits(text))
    return text


def signed_envelope(message: str, subject: str | None = None) -> dict[str, Any]:
    """A signed Notification; text SNS could not have signed (lone surrogates) gets a bogus signature."""
    env = notification(message, TOPIC, "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem", subject)
    if not all(is_utf8(v) for v in env.values() if isinstance(v, str)):
        return {**env, "SignatureVersion": "2", "Signature": "QUFBQQ=="}
    return sign_envelope(env, IDENTITY)


ENVELOPE_KEYS = [
    "Type",
    "MessageId",
    "TopicArn",
    "Message",
    "Timestamp",
    "Subject",
    "SignatureVersion",
    "Signature",
    "SigningCertURL",
    "UnsubscribeURL",
    "SubscribeURL",
    "Token",
    "RequestType",
    "ResponseURL",
]


@st.composite
def mutated_envelope_docs(draw: st.DrawFn, base: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    env = dict(base())
    for key in draw(st.lists(st.sampled_from(ENVELOPE_KEYS), max_size=4, unique=True)):
        action = draw(st.sampled_from(["drop", "json", "text", "text"]))
        if action == "drop":
            env.pop(key, None)
        else:
            env[key] = draw(JSON if action == "json" else TEXT)
    return env


@st.composite
def mutated_envelopes(draw: st.DrawFn) -> str:
    message = draw(st.one_of(mutated_requests(), st.just(json.dumps(valid_request())), TEXT))
    env = draw(mutated_envelope_docs(lambda: signed_envelope(message, draw(st.none() | TEXT.filter(bool)))))
    text = _dumps(env, draw(st.booleans()))
    if draw(st.integers(0, 4)) == 0:
        text = draw(text_edits(text))
    return text


RESULTS = st.one_of(
    st.none(),
    TEXT,
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "PhysicalResourceId": st.one_of(TEXT, JSON),
            "Data": st.one_of(
                st.dictionaries(TEXT, JSON, max_size=5),
                JSON,
                st.builds(lambda k, n: {k: "x" * n}, TEXT, st.sampled_from([0, 3000, 4000, 5000])),
            ),
            "NoEcho": JSON,
        },
    ),
    st.dictionaries(TEXT, JSON, max_size=3),
)
REASONS = st.one_of(TEXT, st.builds(lambda t, n: t * n, TEXT, st.integers(0, 3000)))


# -- checks --------------------------------------------------------------------------------------
class Findings:
    """Failing examples of one target, kept (shortest input first) instead of stopping the run."""

    def __init__(self, target: str, figures: Figures):
        self.target, self.examples, self.failures = target, 0, []
        figures.set(f"{target}_examples", 0)  # so the figures table has the target even if it stops early

    def fail(self, what: str, data: Any) -> None:
        text = repr(data)
        shown = text if len(text) <= 400 else f"{text[:260]} ...[{len(text) - 360} chars]... {text[-100:]}"
        self.failures.append((len(text), what, shown))

    def report(self, figures: Figures) -> None:
        figures.set(f"{self.target}_examples", self.examples)
        figures.add("failures", len(self.failures))
        figures.set(f"{self.target}_failures", len(self.failures))
        kinds: dict[str, tuple[int, str, str]] = {}
        for failure_ in sorted(self.failures):
            kinds.setdefault(failure_[1].split(":")[0], failure_)
        assert not self.failures, (
            f"{self.target}: {len(self.failures)} of {self.examples} examples failed; shortest per kind:\n"
            + "\n".join(f"- {what}\n  input: {data}" for _, what, data in kinds.values())
        )


def _strict(name: str) -> Any:
    raise ValueError(f"{name} in a response body")


def check_response(request: Request, response: Response, label: str) -> list[str]:
    problems = []
    if len(response.body) > MAX_BODY:
        problems.append(f"{label}: body is {len(response.body)} bytes")
    try:
        doc = json.loads(response.body.decode("utf-8", "strict"), parse_constant=_strict)
    except ValueError as exc:
        return problems + [f"{label}: body is not strict UTF-8 JSON ({exc})"]
    if not isinstance(doc, dict):
        return problems + [f"{label}: body is a {type(doc).__name__}"]
    for name in ("StackId", "RequestId", "LogicalResourceId"):
        if doc.get(name) != request.wire[name]:
            problems.append(f"{label}: {name} not copied verbatim")
    if doc.get("Status") not in ("SUCCESS", "FAILED") or doc["Status"] != response.status:
        problems.append(f"{label}: Status {doc.get('Status')!r}")
    pid = doc.get("PhysicalResourceId")
    if not isinstance(pid, str) or not pid or len(pid.encode("utf-8")) > 1024:
        problems.append(f"{label}: PhysicalResourceId {str(pid)[:60]!r}")
    if doc.get("Status") == "FAILED" and not doc.get("Reason"):
        problems.append(f"{label}: FAILED without a Reason")
    return problems


def read_all_properties(request: Request) -> None:
    """What the worker reads from a Request (any of these raising would crash the message)."""
    for name in (
        "request_type",
        "resource_type",
        "response_url",
        "stack_id",
        "request_id",
        "logical_id",
        "physical_id",
        "properties",
        "key",
        "stack_name",
        "service_timeout",
        "problems",
    ):
        getattr(request, name)
    json.dumps(request.wire)  # a handler may serialise its event


def fuzz_request(findings: Findings, text: str, result: Any, reason: str) -> None:
    findings.examples += 1
    try:
        request = parse(text)
    except NotARequest:
        return
    except Exception as exc:  # noqa: BLE001 - the point: nothing else may escape
        findings.fail(f"parse raised {type(exc).__name__}: {str(exc)[:120]}", text)
        return
    try:
        read_all_properties(request)
        built = [
            ("success", success(request, result)),
            ("failure", failure(request, reason)),
            ("no-handler", failure(request, f"no handler for {request.resource_type}")),
        ]
        if request.problems:
            built.append(("invalid", failure(request, "invalid request: " + "; ".join(request.problems))))
    except Exception as exc:  # noqa: BLE001
        findings.fail(f"building the answer raised {type(exc).__name__}: {str(exc)[:120]}", (text, result, reason))
        return
    for label, response in built:
        for problem in check_response(request, response, label):
            findings.fail(problem, (text, result, reason))


def fuzz_envelope(findings: Findings, body: str) -> None:
    findings.examples += 1
    try:
        envelope = unwrap(body, "sqs-message-id", NOW)
    except BadMessage:
        return
    except Exception as exc:  # noqa: BLE001
        findings.fail(f"unwrap raised {type(exc).__name__}: {str(exc)[:120]}", body)
        return
    try:
        assert isinstance(envelope, Envelope)
        assert isinstance(envelope.message, str) and isinstance(envelope.message_id, str)
        assert envelope.timestamp.tzinfo is not None
        envelope.timestamp.timestamp() + 3600  # the worker's deadline arithmetic
        if envelope.raw:
            assert envelope.message == body and envelope.message_id == "sqs-message-id"
        else:
            assert isinstance(envelope.topic_arn, str) and envelope.topic_arn
    except Exception as exc:  # noqa: BLE001
        findings.fail(f"accepted envelope unusable: {type(exc).__name__}: {exc}", body)


# -- the targets -----------------------------------------------------------------------------------
def test_fuzz_envelope_parser(figures: Figures) -> None:
    findings = Findings("envelope", figures)

    @SETTINGS
    @given(body=st.one_of(st.text(), st.text(ANY_CHAR), JSON.map(_dumps), mutated_envelopes(), mutated_requests()))
    def run(body: str) -> None:
        fuzz_envelope(findings, body)

    run()
    findings.report(figures)


def test_fuzz_request_parser_and_response_builder(figures: Figures) -> None:
    findings = Findings("request", figures)

    @SETTINGS
    @given(
        text=st.one_of(
            st.text(),
            JSON.map(_dumps),
            st.dictionaries(TEXT, JSON).map(_dumps),
            mutated_requests(),
            mutated_requests(),
            mutated_requests(),
        ),
        result=RESULTS,
        reason=REASONS,
    )
    def run(text: str, result: Any, reason: str) -> None:
        fuzz_request(findings, text, result, reason)

    run()
    findings.report(figures)


def _signed_fields(env: dict[str, Any]) -> Any:
    try:
        return string_to_sign(env), env.get("SigningCertURL")
    except Exception as exc:  # noqa: BLE001
        return repr(exc)


def test_fuzz_signature_verifier(figures: Figures) -> None:
    findings = Findings("signature", figures)
    loop = asyncio.new_event_loop()
    with CertServer() as certs:
        cert_url = certs.add("SimpleNotificationService-fuzz.pem", IDENTITY.cert_pem)
        verifier = SignatureVerifier(trusted_cert_prefixes=(certs.base_url,), fetch_timeout=5)

        def original(subject: str | None) -> dict[str, Any]:
            env = notification(json.dumps(valid_request()), TOPIC, cert_url, subject)
            return sign_envelope(env, IDENTITY)

        good = original(None)
        loop.run_until_complete(verifier.verify(good))  # the instrument works: a real envelope passes

        @SETTINGS
        @given(data=st.data(), subject=st.none() | TEXT.filter(lambda t: bool(t) and is_utf8(t)))
        def run(data: st.DataObject, subject: str | None) -> None:
            findings.examples += 1
            base = original(subject)
            env = data.draw(mutated_envelope_docs(lambda: base))
            if data.draw(st.booleans()):
                env["SigningCertURL"] = data.draw(
                    st.sampled_from(
                        [
                            cert_url,
                            certs.base_url + "other.pem",
                            certs.base_url + "a/../x.pem",
                            "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
                            "http://169.254.169.254/x.pem",
                            cert_url + "\x00",
                            cert_url.replace("http://", "http://user@"),
                        ]
                    )
                )
            try:
                loop.run_until_complete(asyncio.wait_for(verifier.verify(env), 10))
            except (SignatureError, CertificateUnavailable):
                return
            except Exception as exc:  # noqa: BLE001
                findings.fail(f"verify raised {type(exc).__name__}: {str(exc)[:120]}", env)
                return
            if _signed_fields(env) != _signed_fields(base):
                findings.fail("verify accepted an envelope whose signed fields were changed", env)

        try:
            run()
        finally:
            loop.run_until_complete(verifier.close())
            loop.close()
    figures.set("signature_certificate_fetches", sum(certs.hits.values()))
    findings.report(figures)


@pytest.mark.parametrize("depth", [450, 900])
def test_parse_of_deeply_nested_properties_is_documented(depth: int) -> None:
    """The shortest form of what the request fuzzer finds: json.loads accepts nesting up to
    about 1000 levels, so parse must return a Request or raise NotARequest for it, nothing else."""
    text = json.dumps(valid_request())[:-1] + ', "ResourceProperties": ' + '{"a":' * depth + "1" + "}" * depth + "}"
    try:
        request = parse(text)
    except NotARequest:
        return
    assert json_size(request.stack_id) > 0


@pytest.mark.parametrize("field", ["Message", "Subject", "MessageId"])
async def test_verify_of_non_utf8_envelope_is_a_signature_error(field: str) -> None:
    """The shortest form of what the signature fuzzer finds: a lone surrogate ("\\udcff" in the
    JSON) in a signed field cannot have been signed by SNS; verify must say SignatureError."""
    env = {**signed_envelope("{}", subject="s"), field: "x\udcff"}
    verifier = SignatureVerifier()
    try:
        with pytest.raises(SignatureError):
            await verifier.verify(env)
    finally:
        await verifier.close()
