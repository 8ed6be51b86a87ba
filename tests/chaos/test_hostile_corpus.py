"""Chaos suite 4: a hostile input corpus, pushed through the real queue into one daemon.

One in-process daemon with signature verification ON (trusting a tests.support.sns_signing
CertServer on 127.0.0.1 through `trust_signing_cert_urls`), the provider's topic as the only
accepted TopicArn and the emulator as the only allowed ResponseURL prefix. Every corpus item
is an SQS body put on the real queue with SendMessage: crafted bodies as they are, and
envelopes signed here like Amazon SNS signs them (moto's own envelopes name a certificate on
sns.<region>.amazonaws.com, which the daemon would try to fetch from the real AWS, so SNS
Publish is not used).

Each item names its documented outcome (docs/guarantees.md, "Bad input: what each gets", and
docs/security.md): a `rejected` or `security` log line with no response and no handler call, or a
SUCCESS / FAILED response (read back from S3) whose Reason names the problem, with the ids
copied verbatim and a body of at most 4096 bytes. After each batch a good signed request
must be answered (the daemon still serves), and one more after the whole corpus.

Outbound traffic is watched twice:
- every hostile URL (ResponseURL, SigningCertURL, SubscribeURL, UnsubscribeURL) that can
  carry a port points at a tests.support.listener.ConnectionCounter, which must see 0
  connections;
- an egress guard wraps socket.socket.connect / connect_ex and socket.getaddrinfo for the
  test's duration (below boto, aiobotocore and aiohttp, which are not mocked): a connection
  to anything but the emulator's and the certificate server's ports is recorded, and refused
  unless it is to 127.0.0.1 (where the counter sees it too); a name lookup of anything but
  localhost is recorded and refused. So a URL to 169.254.169.254, or to a lookalike host
  that would need DNS, can never actually leave the machine, and is counted if tried.

Non-UTF-8 bytes: SQS message bodies are Unicode text restricted to XML characters (#x9,
#xA, #xD, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF); SendMessage refuses anything
else, so raw invalid bytes never reach a consumer. What does arrive is their JSON form:
lone-surrogate escapes such as "\\udcff" (what json.dumps writes for bytes decoded with
Python's surrogateescape, and what any JSON producer may emit) and Latin-1 mojibake
(C1 controls U+0080-U+009F are valid XML characters). Both are in the corpus, at the
envelope level and inside the request; every body is checked against SQS's character rule
before it is sent (moto does not enforce it).

Unhandled exceptions are counted from `message.crashed` log lines (the poller's last-resort
catch), any other error-level line carrying a traceback, and the event loop's exception
handler; the figure must be 0.

Sizes: reduced (`make test`) sends each corpus item once. Full (`make chaos`) regenerates the
corpus in several seeded rounds (fresh ids, randomly chosen variants: unicode strings, depths,
hosts, missing fields) and adds seeded blind mutations of corpus bodies (characters deleted,
inserted, duplicated; truncation), whose only documented outcome is "some terminal log line,
no crash, no outbound traffic".
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
import structlog
from structlog.testing import capture_logs

from cfn_provider.local.emulator import Provider, Stack, key_of
from cfn_provider.pipeline.request import MAX_DEPTH
from tests.chaos.conftest import Figures, scale
from tests.support import handlers
from tests.support.egress import EgressGuard
from tests.support.listener import ConnectionCounter
from tests.support.sns_signing import CertServer, SigningIdentity, make_identity, notification, sign_envelope

SEED = 20240504
ROUNDS = scale(1, 4)  # structured corpus regenerated this many times
BLIND_MUTATIONS = scale(0, 100)  # extra randomly mutated bodies (full size only)
BATCH = scale(16, 25)  # items sent together, followed by a good canary request
BATCH_TIMEOUT = 40.0  # seconds for every item of a batch to reach its terminal log line
SQS_MAX_BYTES = 262_144  # SQS's classic message size limit (256 KiB)
MAX_BODY = 4096

TERMINAL = ("rejected", "security", "request", "message.crashed", "deferred")
_SQS_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

UNICODE = [
    "Ünïcödé",
    "😀🔥🦄",
    "\u202eevil\u202c",
    "e\u0301\u0301",
    "zw\u200dj\u200b",
    "中文字符",
    "\u0000nul",
    "tab\there",
    "\ufeffbom",
    "\u2028line\u2029",
    "ʻokina",
    "ﷺ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\U0010fffd",
    "\x85\x9f",
    "Ã©Ã¼",  # C1 controls and Latin-1 mojibake: what bad bytes look like
]
LONE_SURROGATES = ["\udcff", "\ud800", "\udfff", "\udc80\udc81", "\ud83d"]  # a lone high half of an emoji


# ---------------------------------------------------------------------------------------- corpus
def sqs_body(obj: Any) -> str:
    """JSON as SNS/SQS would carry it: UTF-8 text, with anything SQS refuses written as an escape."""
    text = json.dumps(obj, ensure_ascii=False)
    return _SQS_INVALID.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def sqs_acceptable(body: str) -> bool:
    return bool(body) and not _SQS_INVALID.search(body) and len(body.encode("utf-8")) <= SQS_MAX_BYTES


@dataclass
class Item:
    name: str
    body: str
    expect: tuple[str, ...]  # acceptable outcomes: rejected, security, SUCCESS, FAILED, undelivered, any
    reason: str = ""  # a substring of the log line's reason or the response's Reason
    request: dict[str, Any] | None = None  # the request carried, when its ResponseURL reaches S3
    message_id: str = ""
    # filled in after the run
    observed: str = "none"
    detail: str = ""


@dataclass
class Ctx:
    provider: Provider
    stack: Stack
    certs: CertServer
    identity: SigningIdentity
    other_identity: SigningIdentity
    cert_url: str
    counter: ConnectionCounter
    rng: random.Random
    endpoint: str = field(init=False)
    last_request: dict[str, Any] | None = None  # the request most recently built: what the next item carries

    def __post_init__(self) -> None:
        self.endpoint = self.provider.emulator.endpoint

    @property
    def port(self) -> int:
        return self.counter.port

    def pick(self, options: list[Any]) -> Any:
        return self.rng.choice(options)

    def request(
        self,
        kind: str = "Create",
        logical: str = "Thing",
        rtype: str = "Custom::Test",
        props: dict[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        req = self.stack.request(
            kind, logical, resource_type=rtype, properties=props, physical_id=fields.pop("physical_id", None)
        )
        req.update(fields)
        self.last_request = req
        return req

    def envelope(
        self,
        message: str,
        *,
        topic: str | None = None,
        subject: str | None = None,
        cert_url: str | None = None,
        identity: SigningIdentity | None = None,
        version: str = "2",
        sign: bool = True,
        after: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        env = notification(message, topic or self.provider.topic_arn, cert_url or self.cert_url, subject)
        env["UnsubscribeURL"] = self.counter.url("/?Action=Unsubscribe&SubscriptionArn=x")  # never to be called
        env.update(extra)
        if sign:
            env = sign_envelope(env, identity or self.identity, version)
        else:
            env.update(SignatureVersion=version, Signature=base64.b64encode(self.rng.randbytes(256)).decode("ascii"))
        return after(env) if after else env

    def signed(self, request: dict[str, Any] | str, **kw: Any) -> str:
        message = request if isinstance(request, str) else sqs_body(request)
        return sqs_body(self.envelope(message, **kw))


def _without(*keys: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda env: {k: v for k, v in env.items() if k not in keys}


def _with(**values: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda env: {**env, **values}


def _flip_signature(env: dict[str, Any]) -> dict[str, Any]:
    raw = bytearray(base64.b64decode(env["Signature"]))
    raw[len(raw) // 2] ^= 0x01
    return {**env, "Signature": base64.b64encode(bytes(raw)).decode("ascii")}


def _nested(depth: int, kind: str = "object") -> str:
    return ('{"a":' * depth + "1" + "}" * depth) if kind == "object" else ("[" * depth + "]" * depth)


def _with_raw_properties(ctx: Ctx, req: dict[str, Any], raw_properties: str) -> str:
    """The request's JSON with ResourceProperties replaced by raw JSON text (too deep to build as dicts)."""
    doc = {k: v for k, v in req.items() if k != "ResourceProperties"}
    return sqs_body(doc)[:-1] + ', "ResourceProperties": ' + raw_properties + "}"


def corpus(ctx: Ctx) -> list[Item]:
    """Every item of the issue's corpus, with its documented outcome. Variants come from ctx.rng."""
    items: list[Item] = []
    port, endpoint, u = ctx.port, ctx.endpoint, ctx.pick

    def add(
        name: str, body: str, expect: str | tuple[str, ...], reason: str = "", request: dict[str, Any] | None = None
    ) -> None:
        # Every item carries the request it was built from (if any), so a response or handler
        # call for an item that should have none is seen too.
        request = request or ctx.last_request
        ctx.last_request = None
        items.append(Item(name, body, (expect,) if isinstance(expect, str) else expect, reason, request))

    # -- bodies that are not JSON, or JSON of the wrong shape --------------------------------
    add(
        "not-json",
        u(["this is not json {", "<xml/>", "{'Type': 'Notification'}", '{"a":}', "\x7f"]),
        "rejected",
        "not JSON",
    )
    add("blank", u([" ", "\n\t ", "\r\n"]), "rejected", "not JSON")
    add("json-array", json.dumps([1, {"Type": "Notification"}]), "rejected", "JSON list")
    add("json-string", json.dumps(json.dumps({"Type": "Notification"})), "rejected", "JSON str")
    add("json-number", u(["12345", "-0.0", "1e308"]), "rejected", "not an object")
    add("json-null", "null", "rejected", "NoneType")
    add("json-wrong-object", json.dumps({"hello": "world", "Messages": []}), "rejected", "neither")
    add("json-nan", '{"Type": NaN, "Message": Infinity}', "rejected", "")  # Python's json accepts NaN: any rejection
    add("body-nested-deep", _nested(u([50_000, 100_000]), "array"), "rejected", "RecursionError")
    add("body-5000-digit-number", '{"Type": "Notification", "Message": ' + "9" * 5000 + "}", "rejected", "not JSON")
    add("raw-delivery-unsigned", sqs_body(ctx.request(logical="Raw")), "security", "raw message delivery")

    # -- envelopes with every required field missing in turn --------------------------------
    missing_outcomes = {
        "Type": ("rejected", "neither"),
        "Message": ("rejected", "neither"),
        "MessageId": ("rejected", "lacks string fields: MessageId"),
        "TopicArn": ("rejected", "lacks string fields: TopicArn"),
        "Timestamp": ("rejected", "lacks string fields: Timestamp"),
        "SignatureVersion": ("security", "SignatureVersion"),
        "Signature": ("security", "Signature is missing"),
        "SigningCertURL": ("security", "SigningCertURL is missing"),
    }
    for missing, (expect, reason) in missing_outcomes.items():
        req = ctx.request(logical=f"Missing{missing}")
        add(f"envelope-missing-{missing}", ctx.signed(req, after=_without(missing)), expect, reason)
    add(
        "envelope-empty-strings",
        ctx.signed(ctx.request(logical="Empty"), after=_with(MessageId="", TopicArn="")),
        "rejected",
        "lacks string fields",
    )

    # -- wrong Type: never auto-confirmed, nothing called -----------------------------------
    for kind in ("SubscriptionConfirmation", "UnsubscribeConfirmation"):
        env = {
            "Type": kind,
            "MessageId": str(uuid.uuid4()),
            "TopicArn": ctx.provider.topic_arn,
            "Token": "t" * 64,
            "Message": f"You have chosen to {kind}",
            "Timestamp": "2026-01-01T00:00:00.000Z",
            "SubscribeURL": ctx.counter.url(f"/?Action=ConfirmSubscription&Token={'t' * 64}"),
            "SigningCertURL": ctx.cert_url,
        }
        add(f"type-{kind}", sqs_body(sign_envelope(env, ctx.identity)), "rejected", "not confirmed automatically")
    add(
        "type-other",
        ctx.signed(
            ctx.request(logical="Typo"),
            after=_with(Type=u(["notification", "Notification ", "Notice", "Ⓝotification"])),
        ),
        "rejected",
        "is not Notification",
    )
    add(
        "type-not-a-string",
        ctx.signed(ctx.request(logical="TypeList"), after=_with(Type=["Notification"])),
        "rejected",
        "is not Notification",
    )

    # -- signature and topic ------------------------------------------------------------------
    add(
        "topic-not-allowlisted",
        ctx.signed(ctx.request(logical="OtherTopic"), topic=ctx.provider.topic_arn + u(["-other", "2", ":x"])),
        "security",
        "not in the allowlist",
    )
    add(
        "topic-from-other-account",
        ctx.signed(
            ctx.request(logical="OtherAccount"), topic=ctx.provider.topic_arn.replace("123456789012", "999999999999")
        ),
        "security",
        "not in the allowlist",
    )
    add(
        "tampered-message",
        ctx.signed(
            ctx.request(logical="Tampered"),
            after=lambda env: {**env, "Message": env["Message"].replace("Custom::Test", "Custom::Echo")},
        ),
        "security",
        "does not match",
    )
    add(
        "tampered-subject",
        ctx.signed(ctx.request(logical="Subject"), subject="hello", after=_with(Subject="HELLO")),
        "security",
        "does not match",
    )
    add(
        "subject-added",
        ctx.signed(ctx.request(logical="SubjectAdded"), after=_with(Subject="added")),
        "security",
        "does not match",
    )
    add(
        "tampered-signature",
        ctx.signed(ctx.request(logical="Flipped"), after=_flip_signature),
        "security",
        "does not match",
    )
    add(
        "signature-not-base64",
        ctx.signed(ctx.request(logical="B64"), after=_with(Signature="!!not*base64!!")),
        "security",
        "base64",
    )
    add(
        "signature-version-3",
        ctx.signed(ctx.request(logical="V3"), after=_with(SignatureVersion="3")),
        "security",
        "SignatureVersion",
    )
    add(
        "signature-version-number",
        ctx.signed(ctx.request(logical="VNum"), after=_with(SignatureVersion=2)),
        "security",
        "SignatureVersion",
    )
    add(
        "signed-by-another-key",
        ctx.signed(ctx.request(logical="OtherKey"), identity=ctx.other_identity),
        "security",
        "does not match",
    )
    add("subject-null", ctx.signed(ctx.request(logical="SubjNull"), after=_with(Subject=None)), "security", "Subject")
    add(
        "signature-v1-valid-but-topic-wrong",
        ctx.signed(ctx.request(logical="V1"), version="1", topic="arn:aws:sns:us-east-1:123456789012:elsewhere"),
        "security",
        "not in the allowlist",
    )

    # -- SigningCertURL: never fetched from outside SNS hosts / the trusted prefix -----------
    cert_urls = {
        "cert-non-sns-host": f"http://127.0.0.1:{port}/SimpleNotificationService-x.pem",
        "cert-http-sns-host": "http://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
        "cert-lookalike-host": u(
            [
                f"https://sns.us-east-1.amazonaws.com.evil.example:{port}/SNS-x.pem",
                "https://sns.us-east-1.amazonaws.com.evil.example/SimpleNotificationService-x.pem",
                f"https://sns.us-east-1.amazonaws.com.{port}.evil.example/x.pem",
            ]
        ),
        "cert-userinfo-trick": f"https://sns.us-east-1.amazonaws.com@127.0.0.1:{port}/SimpleNotificationService-x.pem",
        "cert-localhost": f"http://localhost:{port}/SimpleNotificationService-x.pem",
        "cert-trusted-prefix-traversal": ctx.certs.base_url + "a/../../SimpleNotificationService-x.pem",
        "cert-sns-host-other-port": f"https://sns.us-east-1.amazonaws.com:{port}/SimpleNotificationService-x.pem",
        "cert-metadata-ip": "http://169.254.169.254/latest/meta-data/SimpleNotificationService-x.pem",
    }
    for name, url in cert_urls.items():
        add(
            name, ctx.signed(ctx.request(logical="Cert"), cert_url=url), "security", "not an Amazon SNS certificate URL"
        )

    # -- bad Timestamp ------------------------------------------------------------------------
    add(
        "timestamp-not-iso",
        ctx.signed(
            ctx.request(logical="Stamp"),
            after=lambda env: sign_envelope(
                {**env, "Timestamp": u(["yesterday", "2024-13-45T99:00:00Z", "1714564800"])}, ctx.identity
            ),
        ),
        "rejected",
        "not ISO 8601",
    )
    add(
        "timestamp-number",
        ctx.signed(ctx.request(logical="StampNum"), after=_with(Timestamp=1714564800)),
        "rejected",
        "lacks string fields: Timestamp",
    )

    # -- the envelope's Message is not a request ------------------------------------------------
    add("message-not-json", ctx.signed("hello, this is not a request"), "rejected", "message is not JSON")
    add("message-json-list", ctx.signed(json.dumps([ctx.request(logical="InList")])), "rejected", "JSON list")
    add(
        "message-not-a-string",
        ctx.signed(ctx.request(logical="MsgObj"), after=lambda env: {**env, "Message": json.loads(env["Message"])}),
        "rejected",
        "lacks string fields: Message",
    )

    # -- requests that cannot be answered (no usable ResponseURL / ids): logged, not run -------
    for missing in ("ResponseURL", "StackId", "RequestId", "LogicalResourceId"):
        req = ctx.request(logical=f"No{missing}")
        del req[missing]
        add(f"request-missing-{missing}", ctx.signed(req), "rejected", f"non-string {missing}")
    for name, value in (("RequestId", 12345), ("StackId", 1.5), ("LogicalResourceId", True), ("ResponseURL", 0)):
        add(
            f"request-number-{name}",
            ctx.signed(ctx.request(logical=f"Num{name}", **{name: value})),
            "rejected",
            f"non-string {name}",
        )
    add(
        "request-oversized-RequestId",
        ctx.signed(ctx.request(logical="LongId", RequestId="r" * 300)),
        "rejected",
        "oversized RequestId",
    )

    # -- answerable but invalid requests: FAILED naming the problem -------------------------
    for missing in ("RequestType", "ResourceType"):
        req = ctx.request(logical=f"Lacks{missing}")
        del req[missing]
        add(f"request-missing-{missing}", ctx.signed(req), "FAILED", f"missing fields: {missing}", req)
    req = ctx.request("Update", logical="UpdateNoId")
    add("update-without-physical-id", ctx.signed(req), "FAILED", "required on Update", req)
    req = ctx.request("Destroy", logical="Destroy")
    add("request-type-destroy", ctx.signed(req), "FAILED", "'Destroy' is not one of", req)
    req = ctx.request(u(["create", "DELETE", "", "Create ", "Créate"]), logical="Odd")
    add("request-type-other", ctx.signed(req), "FAILED", "is not one of", req)
    for name, value in (
        ("RequestType", 1),
        ("ResourceType", 42),
        ("ResourceProperties", "Colour=blue"),
        ("OldResourceProperties", [1, 2]),
    ):
        kind = "Update" if name == "OldResourceProperties" else "Create"
        req = ctx.request(
            kind, logical=f"Num{name}", physical_id="pid-1" if kind == "Update" else None, **{name: value}
        )
        add(f"request-wrong-type-{name}", ctx.signed(req), "FAILED", f"{name} is a {type(value).__name__}", req)
    req = ctx.request("Update", logical="NumPid", physical_id=7)
    add("request-number-PhysicalResourceId", ctx.signed(req), "FAILED", "PhysicalResourceId is a int", req)
    req = ctx.request("Update", logical="LongPid", physical_id="p" * 2000)
    add("request-oversized-PhysicalResourceId", ctx.signed(req), "FAILED", "at most 1024 bytes", req)
    req = ctx.request(logical="Nobody", rtype=u(["Custom::Nobody", "AWS::S3::Bucket", "Custom::*"]))
    add("unknown-resource-type", ctx.signed(req), "FAILED", f"no handler for {req['ResourceType']}", req)

    # -- numbers where strings belong in ResourceProperties: served ------------------------------
    req = ctx.request(
        logical="Timeouts",
        props={
            "ServiceTimeout": u([30, 1e308, True, "abc", [1], {"a": 1}]),
            "Count": 3,
            "Ratio": 0.5,
            "Flag": False,
            "Nothing": None,
        },
    )
    add("properties-numbers-and-odd-timeout", ctx.signed(req), "SUCCESS", "", req)
    req = ctx.request(logical="Stale")
    add(
        "timestamp-in-the-past",
        ctx.signed(
            req, after=lambda env: sign_envelope({**env, "Timestamp": "2001-01-01T00:00:00.000Z"}, ctx.identity)
        ),
        "FAILED",
        "timed out",
        req,
    )

    # -- another dialect's fields change nothing: on SQS a request is CloudFormation's ----------
    ros_fields = {
        "StackName": u(["prod", "victim"]),
        "RegionId": "cn-hangzhou",
        "ResourceOwnerId": "1",
        "CallerId": "1",
    }
    oss = u(
        [
            "https://loot.oss-cn-hangzhou.aliyuncs.com/k?Signature=x",
            "https://ros.cn-hangzhou.aliyuncs.com/callback?Signature=x",
            "https://loot.oss-accelerate.aliyuncs.com/k?Expires=1&Signature=x",
        ]
    )
    add(
        "ros-fields-with-an-aliyun-url",
        ctx.signed(ctx.request(logical="RosSwitch", ResponseURL=oss, **ros_fields)),
        "security",
        "aliyuncs.com",
    )
    req = ctx.request(
        logical="RosIntranet",
        IntranetResponseURL=u(["http://169.254.169.254/latest/meta-data/", f"http://127.0.0.1:{port}/intranet"]),
        **ros_fields,
    )
    add("ros-fields-intranet-url-never-called", ctx.signed(req), "SUCCESS", "", req)  # answered on its ResponseURL
    req = ctx.request(logical="PlainStackId", StackId=str(uuid.uuid4()), **ros_fields)
    add("plain-stack-id-still-cloudformation", ctx.signed(req), "SUCCESS", "", req)

    # -- ResponseURL outside the allowlist: not run, nothing called -----------------------------
    response_urls = {
        "url-metadata": u(
            [
                "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
                "https://169.254.169.254/latest/api/token",
            ]
        ),
        "url-metadata-ipv6": "http://[fd00:ec2::254]/latest/meta-data/",
        "url-localhost": u(
            [f"http://localhost:{port}/bucket/key?X-Amz-Signature=abc", f"https://localhost:{port}/bucket/key"]
        ),
        "url-loopback-ip": f"http://127.0.0.1:{port}/bucket/key?X-Amz-Signature=abc",
        "url-loopback-ipv6": f"http://[::1]:{port}/bucket/key",
        "url-http-s3": u(
            [
                "http://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k",
                "http://s3.amazonaws.com/bucket/k",
            ]
        ),
        "url-lookalike-s3": u(
            [
                f"https://s3.amazonaws.com.evil.example:{port}/k",
                "https://bucket.s3.us-east-1.amazonaws.com.evil.example/k",
                "https://s3-x.us-east-1.elb.amazonaws.com/k",
                "https://s3.amazonaws.co/k",
                "https://s3.amazonaws.com%2eevil.example/k",
            ]
        ),
        "url-s3-userinfo": f"https://bucket.s3.amazonaws.com@127.0.0.1:{port}/k",
        "url-s3-other-port": f"https://bucket.s3.amazonaws.com:{port}/k",
        "url-allowlist-userinfo-trick": endpoint.replace("http://", "http://user@") + "/bucket/k",
        "url-allowlist-port-trick": f"{endpoint}@127.0.0.1:{port}/bucket/k",
        "url-allowlist-traversal": u([f"{endpoint}/bucket/../../admin", f"{endpoint}/bucket/%2e%2e/%2e%2e/admin"]),
        "url-file-scheme": "file:///etc/passwd",
        "url-not-a-url": u(["not a url", "//s3.amazonaws.com/k", "https://"]),
    }
    for name, url in response_urls.items():
        add(name, ctx.signed(ctx.request(logical="Proxy", ResponseURL=url)), "security", "ResponseURL")

    # An allowlisted ResponseURL with a NUL inside: no PUT may go out with it, and the message must
    # end either refused as a security event or as an undeliverable response, never as a crash.
    req = ctx.request(logical="NulUrl")
    head, _, query = req["ResponseURL"].partition("?")
    req["ResponseURL"] = f"{head}\x00evil?{query}"
    add("url-allowlisted-with-nul", ctx.signed(req), ("security", "undelivered"), "")

    # -- size ------------------------------------------------------------------------------------
    for rtype, expect, reason in (("Custom::Test", "SUCCESS", ""), ("Custom::Echo", "FAILED", "4096")):
        req = ctx.request(logical="Huge", rtype=rtype, props={"Blob": ""})
        probe = ctx.signed(req)
        room = SQS_MAX_BYTES - 64 - len(probe.encode("utf-8"))
        req["ResourceProperties"]["Blob"] = "x" * room
        body = ctx.signed(req)
        assert SQS_MAX_BYTES - 128 <= len(body.encode("utf-8")) <= SQS_MAX_BYTES
        add(f"message-256KiB-{rtype.split('::')[1]}", body, expect, reason, req)

    # -- deeply nested properties ------------------------------------------------------------
    # within the daemon's documented nesting limit: served; just beyond it: FAILED saying why
    req = ctx.request(logical="Nested")
    req["ResourceProperties"] = json.loads(_nested(u([20, 40, MAX_DEPTH - 4])))
    add("properties-nested", ctx.signed(req), "SUCCESS", "", req)
    req = ctx.request(logical="NestedPastLimit")
    req["ResourceProperties"] = json.loads(_nested(MAX_DEPTH + u([1, 10, 100])))
    add("properties-nested-past-limit", ctx.signed(req), "FAILED", "nests deeper", req)
    # Deep enough for json.loads (limit ~1000) but deeper than any CloudFormation template: an
    # answerable request (ids and ResponseURL are all there), so SUCCESS or FAILED, never a crash.
    req = ctx.request(logical="NestedDeep")
    add(
        "properties-nested-deep",
        ctx.signed(_with_raw_properties(ctx, req, _nested(u([450, 600, 900])))),
        ("SUCCESS", "FAILED"),
        "",
        req,
    )
    req = ctx.request(logical="NestedTooDeep")
    add(
        "properties-nested-beyond-json",
        ctx.signed(_with_raw_properties(ctx, req, _nested(20_000, "array"))),
        ("rejected", "FAILED"),
        "",
    )

    # -- non-UTF-8 (see the module docstring for the realistic forms) ---------------------------
    bad = u(LONE_SURROGATES)
    add(
        "nonutf8-envelope-message",
        ctx.signed(ctx.request(logical="Bad8"), sign=False, after=lambda env: {**env, "Message": env["Message"] + bad}),
        "security",
        "",
    )
    add(
        "nonutf8-envelope-subject",
        ctx.signed(ctx.request(logical="Bad8Subj"), sign=False, subject="s" + bad),
        "security",
        "",
    )
    add("nonutf8-envelope-type", sqs_body({"Type": "Notific" + bad, "Message": "{}"}), "rejected", "not Notification")
    add(
        "nonutf8-request-id",
        ctx.signed(ctx.request(logical="Bad8Id", RequestId=str(uuid.uuid4()) + bad)),
        "rejected",
        "not valid UTF-8",
    )
    req = ctx.request(logical="Bad8Type", rtype="Custom::" + bad)
    add("nonutf8-resource-type", ctx.signed(req), "FAILED", "no handler for Custom::", req)
    req = ctx.request("Update", logical="Bad8Pid", physical_id="pid-" + bad)
    add("nonutf8-physical-id", ctx.signed(req), "FAILED", "PhysicalResourceId is not valid UTF-8", req)
    req = ctx.request(logical="Bad8Props", props={"Name" + bad: "value" + bad, "Mojibake": "Ã©Ã¼\x85\x9f"})
    add("nonutf8-properties", ctx.signed(req), "SUCCESS", "", req)
    req = ctx.request(logical="Bad8Echo", rtype="Custom::Echo", props={"Value": "v" + bad})
    add("nonutf8-echoed-as-data", ctx.signed(req), "FAILED", "not JSON-serialisable", req)

    # -- unicode in every string field ------------------------------------------------------------
    s1, s2, s3 = (u(UNICODE) for _ in range(3))
    rid = f"{uuid.uuid4()}-{s2}"
    req = ctx.request(
        "Update",
        logical=s1,
        physical_id=f"pid-{s3}",
        props={s1: s2, "List": [s3, s1]},
        StackId=f"arn:aws:cloudformation:us-east-1:123456789012:stack/{s2}-{s1}/{uuid.uuid4()}",
        RequestId=rid,
        OldResourceProperties={s3: s1},
        ServiceToken=f"{s2}{s3}",
    )
    req["ResponseURL"] = ctx.stack.response_url(f"{ctx.stack.name}/unicode-{s1.strip(chr(0))}/{uuid.uuid4()}")
    add(
        "unicode-everywhere",
        ctx.signed(req, subject=f"{s3} {s1}", MessageId=f"{s2}-{uuid.uuid4()}"),
        "SUCCESS",
        "",
        req,
    )
    req = ctx.request(logical=s2, rtype=f"Custom::{s1}{s3}", RequestId=f"{uuid.uuid4()}{s1}")
    add("unicode-resource-type", ctx.signed(req, subject=s2), "FAILED", f"no handler for Custom::{s1}{s3}", req)
    return items


def blind_mutation(ctx: Ctx, base: Item) -> Item:
    """A corpus body with random edits: all that is documented is a terminal line and no crash."""
    rng = ctx.rng
    tokens = [
        '"',
        "\\",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "null",
        "1e999",
        "-",
        "\\ud800",
        "\\u0000",
        "é",
        "😀",
        "\u202e",
        " " * 7,
        '"Type":"Notification",',
        '"RequestType":"Create",',
        "\x85",
        "\ufffd",
    ]
    body = base.body
    for _ in range(rng.randint(1, 5)):
        op, at = rng.randrange(5), rng.randrange(len(body) + 1)
        if op == 0:
            body = body[:at] + body[at + rng.randint(1, 16) :]
        elif op == 1:
            body = body[:at] + rng.choice(tokens) + body[at:]
        elif op == 2:
            end = min(len(body), at + rng.randint(1, 64))
            body = body[:end] + body[at:end] + body[end:]
        elif op == 3:
            body = body[: max(1, at)]
        else:
            body = body[:at] + chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0xD7FF)])) + body[at + 1 :]
    body = _SQS_INVALID.sub("", body) or "{"
    body = body.encode("utf-8")[:SQS_MAX_BYTES].decode("utf-8", "ignore") or "{"
    return Item(f"blind<{base.name}>", body, ("any",), "", None)  # its request id is the base item's


# ---------------------------------------------------------------------------------------- running
class Observer:
    """Terminal log line per SQS message id, from the captured structlog entries."""

    def __init__(self, logs: list[dict[str, Any]]):
        self.logs = logs
        self.seen = 0
        self.terminal: dict[str, dict[str, Any]] = {}

    def scan(self) -> None:
        while self.seen < len(self.logs):
            entry = self.logs[self.seen]
            self.seen += 1
            mid = entry.get("message_id")
            if mid and entry.get("event") == "message.crashed":
                self.terminal[mid] = entry  # even after its `request` line: the crash is what ended it
            elif mid and entry.get("event") in TERMINAL and mid not in self.terminal:
                if entry["event"] in ("rejected", "security") and entry.get("log_level") == "debug":
                    continue  # a re-receive of one already logged
                self.terminal[mid] = entry

    async def wait(self, message_ids: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.scan()
            if all(m in self.terminal for m in message_ids):
                return
            await asyncio.sleep(0.05)
        self.scan()


def send(provider: Provider, body: str) -> str:
    assert sqs_acceptable(body), f"SQS would refuse this body: {body[:200]!r}"
    sqs = provider.emulator.client("sqs")
    return sqs.send_message(QueueUrl=provider.queue_url, MessageBody=body)["MessageId"]


def read_response(provider: Provider, request: dict[str, Any]) -> bytes | None:
    url = request.get("ResponseURL")
    if not isinstance(url, str) or not url.startswith(provider.emulator.endpoint + "/"):
        return None
    bucket, key = key_of(url.split("\x00")[0])
    s3 = provider.emulator.client("s3")
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    except Exception:  # noqa: BLE001 - an odd key (e.g. with a NUL): no response to read
        return None


def judge(item: Item, entry: dict[str, Any] | None, provider: Provider) -> list[str]:
    """Problems with `item`'s outcome against its documented one (empty: as documented)."""
    problems: list[str] = []
    if entry is None:
        item.observed = "none"
        return [f"{item.name}: no terminal log line (rejected/security/request) within {BATCH_TIMEOUT} s"]
    event = entry["event"]
    body = read_response(provider, item.request) if item.request else None
    if event == "message.crashed":
        item.observed = "crashed"
        item.detail = ((entry.get("exception") or "").strip().splitlines() or ["?"])[-1]
    elif event in ("rejected", "security", "deferred"):
        item.observed, item.detail = event, entry.get("reason", "")
    elif body is not None:
        try:
            doc = json.loads(body.decode("utf-8"))
            item.observed, item.detail = doc.get("Status", "?"), doc.get("Reason", "")
        except ValueError:
            item.observed, item.detail = "bad-body", body[:200].decode("utf-8", "replace")
    else:
        item.observed = "undelivered" if entry.get("delivered") is False else f"request:{entry.get('outcome')}"
        item.detail = entry.get("delivery_error", "") or entry.get("reason", "")

    if item.observed == "crashed":
        return [f"{item.name}: unhandled exception: {item.detail}"]
    if "any" not in item.expect and item.observed not in item.expect:
        problems.append(f"{item.name}: expected {'/'.join(item.expect)}, got {item.observed} ({item.detail[:160]!r})")
    elif item.reason and item.reason not in item.detail:
        problems.append(f"{item.name}: {item.observed} reason {item.detail[:200]!r} does not name {item.reason!r}")
    if item.observed in ("SUCCESS", "FAILED") and body is not None and item.request:
        doc = json.loads(body)
        if len(body) > MAX_BODY:
            problems.append(f"{item.name}: response body is {len(body)} bytes")
        for name in ("StackId", "RequestId", "LogicalResourceId"):
            if doc.get(name) != item.request.get(name):
                problems.append(f"{item.name}: {name} not copied verbatim: {doc.get(name)!r}")
    if item.observed in ("rejected", "security") and body is not None:
        problems.append(f"{item.name}: {item.observed}, yet a response was PUT")
    if item.observed in ("rejected", "security") and item.request:
        if any(rid == item.request.get("RequestId") for rid, _ in handlers.started):
            problems.append(f"{item.name}: {item.observed}, yet the handler ran")
    return problems


async def test_hostile_corpus(
    monkeypatch: pytest.MonkeyPatch, run_daemon, provider: Provider, stack: Stack, figures: Figures
) -> None:
    began = time.monotonic()
    figures.set("seed", SEED)
    rng = random.Random(SEED)
    loop_errors: list[str] = []
    loop = asyncio.get_running_loop()
    old_handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: loop_errors.append(str(context.get("message"))))
    problems: list[str] = []
    not_as_documented: set[str] = set()
    items: list[Item] = []
    canaries_ok = 0
    canaries = 0
    served_after = 0

    with CertServer() as certs, ConnectionCounter() as counter:
        identity, other = make_identity(), make_identity()
        cert_url = certs.add("SimpleNotificationService-corpus.pem", identity.cert_pem)
        ctx = Ctx(provider, stack, certs, identity, other, cert_url, counter, rng)
        emulator_port = urlsplit(provider.emulator.endpoint).port
        certs_port = urlsplit(certs.base_url).port
        guard = EgressGuard({emulator_port, certs_port})
        guard.install(monkeypatch)

        for _ in range(ROUNDS):
            items.extend(corpus(ctx))
        structured = list(items)
        items.extend(blind_mutation(ctx, rng.choice(structured)) for _ in range(BLIND_MUTATIONS))
        if ROUNDS > 1:
            rng.shuffle(items)

        def canary(logical: str) -> tuple[dict[str, Any], str]:
            req = ctx.request(logical=logical, props={"Colour": "canary"})
            return req, ctx.signed(req)

        try:
            with capture_logs(
                processors=[structlog.contextvars.merge_contextvars, structlog.processors.format_exc_info]
            ) as logs:
                await run_daemon(
                    verify_signatures=True, trust_signing_cert_urls=(certs.base_url,), topic_arns=(provider.topic_arn,)
                )
                observer = Observer(logs)
                for start in range(0, len(items), BATCH):
                    batch = items[start : start + BATCH]
                    for item in batch:
                        item.message_id = await asyncio.to_thread(send, provider, item.body)
                    good, good_body = canary(f"Canary{start}")
                    canary_id = await asyncio.to_thread(send, provider, good_body)
                    canaries += 1
                    await observer.wait([i.message_id for i in batch] + [canary_id], BATCH_TIMEOUT)
                    response = await asyncio.to_thread(read_response, provider, good)
                    if response is not None and json.loads(response)["Status"] == "SUCCESS":
                        canaries_ok += 1
                    else:
                        problems.append(f"canary after items {start}..{start + len(batch) - 1} not answered SUCCESS")
                    for item in batch:
                        found = await asyncio.to_thread(judge, item, observer.terminal.get(item.message_id), provider)
                        if found:
                            not_as_documented.add(item.message_id)
                            problems.extend(found)

                # the last message: a good signed request, answered after the whole corpus
                good, good_body = canary("After")
                after_id = await asyncio.to_thread(send, provider, good_body)
                await observer.wait([after_id], BATCH_TIMEOUT)
                response = await asyncio.to_thread(read_response, provider, good)
                served_after = int(response is not None and json.loads(response)["Status"] == "SUCCESS")

                crashed = [e for e in logs if e.get("event") == "message.crashed"]
                tracebacks = [
                    e
                    for e in logs
                    if e.get("log_level") in ("error", "critical")
                    and e.get("exception")
                    and e.get("event") != "message.crashed"
                ]
        finally:
            loop.set_exception_handler(old_handler)
        outbound = len(guard.attempts)
        listener = counter.connections

    unhandled = len(crashed) + len(tracebacks) + len(loop_errors)
    by_kind: dict[str, int] = {}
    for item in items:
        by_kind[item.observed] = by_kind.get(item.observed, 0) + 1
    figures.set("corpus_items", len(items))
    figures.set("corpus_items_as_documented", len(items) - len(not_as_documented))
    figures.set("outcomes", ", ".join(f"{k}={v}" for k, v in sorted(by_kind.items())))
    figures.set("outbound_to_non_allowlisted", outbound)
    figures.set("listener_connections", listener)
    figures.set("unhandled_exceptions", unhandled)
    figures.set("messages_crashed", len({e.get("message_id") for e in crashed}))
    figures.set("canaries_served", f"{canaries_ok}/{canaries}")
    figures.set("served_after", served_after)
    figures.set("seconds", round(time.monotonic() - began, 1))

    if outbound:
        problems.append(f"outbound attempts outside the allowlist: {sorted(set(guard.attempts))}")
    if listener:
        problems.append(f"the connection counter saw {listener} connection(s)")
    item_ids = {item.message_id for item in items}
    for entry in [e for e in crashed if e.get("message_id") not in item_ids][:5] + tracebacks[:5]:
        last = ((entry.get("exception") or "").strip().splitlines() or ["?"])[-1]
        problems.append(f"unhandled: {entry['event']} message_id={entry.get('message_id')}: {last}")
    problems.extend(f"event loop: {m}" for m in loop_errors[:5])
    if not served_after:
        problems.append("the good message sent after the corpus was not answered SUCCESS")
    if os.environ.get("CFN_CORPUS_TABLE"):  # CFN_CORPUS_TABLE=1 pytest -s ...: every item's outcome
        for item in items:
            print(f"{item.name:<40} {item.observed:<12} {item.detail[:110]!r}")
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(dict.fromkeys(problems))


async def test_egress_guard_sees_what_it_must(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measuring instrument: attempts outside the allowlist are counted, and refused before
    leaving the machine (169.254.169.254 is never actually connected to)."""
    import aiohttp

    with ConnectionCounter() as counter:
        guard = EgressGuard(set())
        guard.install(monkeypatch)
        async with aiohttp.ClientSession() as http:
            for url in (
                "http://169.254.169.254/latest/meta-data/",
                "http://[fd00:ec2::254]/",
                "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
                counter.url("/k"),
            ):
                started = time.monotonic()
                with pytest.raises((aiohttp.ClientError, OSError)):
                    async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                        await resp.read()
                assert time.monotonic() - started < 2, f"{url}: refused at once, not timed out"
        for _ in range(40):
            if counter.connections:
                break
            await asyncio.sleep(0.05)
    assert guard.attempts[:3] == [
        "connect 169.254.169.254:80",
        "connect fd00:ec2::254:80",
        "resolve sns.us-east-1.amazonaws.com.evil.example",
    ]
    assert guard.attempts[3].startswith(f"connect 127.0.0.1:{counter.port}")
    assert counter.connections >= 1
