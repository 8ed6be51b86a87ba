"""cfn_provider.pipeline.admission: each way a message is not admitted is its own class (Rejected,
Forged, Deferred: cfn_provider.errors), and the worker's disposition, log event and count for each."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from cfn_provider.errors import Deferred, Forged, NotAdmitted, Rejected
from cfn_provider.metrics import Metrics
from cfn_provider.pipeline.admission import Admission
from cfn_provider.pipeline.disposition import Disposition
from cfn_provider.pipeline.heartbeat import Heartbeat
from cfn_provider.pipeline.responder import Responder
from cfn_provider.pipeline.router import Router
from cfn_provider.pipeline.worker import Policy, Worker
from cfn_provider.stores.sqlite import SQLiteStore
from cfn_provider.transports.memory import MemoryQueue
from cfn_provider.transports.queue import Message
from cfn_provider.trust.signature import SignatureVerifier
from cfn_provider.trust.urls import ResponseUrlPolicy
from tests.support.sns_signing import CertServer, make_identity, notification, sign_envelope
from tests.support.stub_s3 import StubS3

TOPIC = "arn:aws:sns:us-east-1:123456789012:cfn-provider"


@pytest.fixture
def certs() -> Iterator[CertServer]:
    with CertServer() as server:
        yield server


def _request(s3: StubS3, **fields: Any) -> str:
    request_id = str(uuid.uuid4())
    return json.dumps(
        {
            "RequestType": "Create",
            "ResponseURL": s3.url(f"responses/{request_id}"),
            "StackId": f"arn:aws:cloudformation:us-east-1:123456789012:stack/s/{uuid.uuid4()}",
            "RequestId": request_id,
            "LogicalResourceId": "Thing",
            "ResourceType": "Custom::Thing",
            "ResourceProperties": {"ServiceToken": TOPIC},
            **fields,
        }
    )


def _message(body: str) -> Message:
    return Message(id=str(uuid.uuid4()), body=body, receipt="r-1", sent_at=dt.datetime.now(dt.UTC))


def _signed(certs: CertServer, message: str, topic: str = TOPIC, cert_status: int | None = None) -> str:
    identity = make_identity()
    name = f"SimpleNotificationService-{uuid.uuid4().hex}.pem"
    url = certs.add(name, identity.cert_pem)
    if cert_status is not None:
        certs.statuses["/" + name] = cert_status
    return json.dumps(sign_envelope(notification(message, topic, url), identity))


CASES = {
    # what the message is -> (the class it is refused as, part of the reason)
    "not json": (Rejected, "not JSON"),
    "not a request": (Rejected, "cannot be answered"),
    "response url outside the allowlist": (Forged, "ResponseURL"),
    "raw delivery while signatures are verified": (Forged, "raw message delivery carries no signature"),
    "another topic": (Forged, "is not in the allowlist"),
    "a bad signature": (Forged, "SNS signature rejected"),
    "a certificate that cannot be fetched now": (Deferred, "SNS signing certificate unavailable"),
}


def _body(case: str, s3: StubS3, certs: CertServer) -> str:
    request = _request(s3)
    bodies = {
        "not json": lambda: "{not json",
        "not a request": lambda: _signed(certs, json.dumps({"StackId": "x"})),
        "response url outside the allowlist": lambda: _signed(
            certs, _request(s3, ResponseURL="http://169.254.169.254/latest/meta-data/")
        ),
        "raw delivery while signatures are verified": lambda: request,
        "another topic": lambda: _signed(certs, request, topic="arn:aws:sns:us-east-1:210987654321:elsewhere"),
        "a bad signature": lambda: json.dumps(dict(json.loads(_signed(certs, request)), Message=request + " ")),
        "a certificate that cannot be fetched now": lambda: _signed(certs, request, cert_status=503),
    }
    return bodies[case]()


def _admission(s3: StubS3, certs: CertServer, http: aiohttp.ClientSession) -> Admission:
    return Admission(
        url_policy=ResponseUrlPolicy((s3.base_url,)),
        verifier=SignatureVerifier(http=http, trusted_cert_prefixes=(certs.base_url,), fetch_timeout=5),
        topic_arns=(TOPIC,),
        stopping=lambda: True,  # a certificate not to be had is given up on at once (no backoff in a test)
    )


@pytest.mark.parametrize("case", sorted(CASES))
async def test_each_refusal_is_its_own_class(case, stub_s3: StubS3, certs: CertServer):
    expected, says = CASES[case]
    async with aiohttp.ClientSession() as http:
        with pytest.raises(NotAdmitted) as raised:
            await _admission(stub_s3, certs, http).admit(_message(_body(case, stub_s3, certs)))
    assert type(raised.value) is expected and says in str(raised.value)


async def test_a_signed_request_from_the_topic_is_admitted(stub_s3: StubS3, certs: CertServer):
    request = _request(stub_s3)
    async with aiohttp.ClientSession() as http:
        envelope, admitted = await _admission(stub_s3, certs, http).admit(_message(_signed(certs, request)))
    assert envelope.topic_arn == TOPIC and admitted.request_id == json.loads(request)["RequestId"]


async def test_a_tampered_message_signed_with_a_cached_certificate_is_forged(stub_s3: StubS3, certs: CertServer):
    """The second message of a certificate is checked without a wait (its certificate cached): a
    changed Message, or a signature of another key, is refused as forged there too; the
    certificate was fetched once."""
    identity, other = make_identity(), make_identity()
    name = f"SimpleNotificationService-{uuid.uuid4().hex}.pem"
    url = certs.add(name, identity.cert_pem)
    good, another = _request(stub_s3), _request(stub_s3)
    async with aiohttp.ClientSession() as http:
        admission = _admission(stub_s3, certs, http)
        await admission.admit(_message(json.dumps(sign_envelope(notification(good, TOPIC, url), identity))))
        signed = sign_envelope(notification(another, TOPIC, url), identity)
        tampered = dict(signed, Message=another.replace("Thing", "Other"))
        foreign = sign_envelope(notification(another, TOPIC, url), other)
        for body in (tampered, foreign):
            with pytest.raises(Forged, match="SNS signature rejected: signature does not match"):
                await admission.admit(_message(json.dumps(body)))
        _, admitted = await admission.admit(_message(json.dumps(signed)))
    assert admitted.request_id == json.loads(another)["RequestId"]
    assert certs.hits == {"/" + name: 1}


WORKER = {
    # class -> (disposition, logged event and level the first time, the rejected-messages count's kind)
    Rejected: (Disposition.REJECT, ("rejected", "error"), "rejected"),
    Forged: (Disposition.REJECT, ("security", "warning"), "security"),
    Deferred: (Disposition.DEFER, None, None),  # logged `deferred` by admission when it first failed; not counted
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_worker_disposes_of_each_as_before(case, tmp_path, stub_s3: StubS3, certs: CertServer):
    disposition, logged, counted = WORKER[CASES[case][0]]
    metrics = Metrics()
    store = SQLiteStore(tmp_path / "state.db")
    queue, executor = MemoryQueue(), ThreadPoolExecutor(max_workers=1)
    try:
        async with aiohttp.ClientSession() as http:
            worker = Worker(
                router=Router([], use_entry_points=False),
                store=store,
                responder=Responder(http, max_backoff=0.1),
                url_policy=ResponseUrlPolicy((stub_s3.base_url,)),
                verifier=None,
                policy=Policy(verify_signatures=True, lease_seconds=60),
                metrics=metrics,
                executor=executor,
                owner="worker-under-test",
            )
            worker.admission = _admission(stub_s3, certs, http)
            queue.send(_body(case, stub_s3, certs))
            (message,) = await queue.receive(1, 0, 30)
            with capture_logs() as logs:
                assert await worker.process(message, Heartbeat(queue, message, 30)) is disposition
                again = await worker.process(message, Heartbeat(queue, message, 30))  # the same message again
    finally:
        await store.close()
        executor.shutdown(wait=False)
    assert again is disposition
    events = [(entry["event"], entry["log_level"]) for entry in logs if entry["event"] in ("rejected", "security")]
    if logged is None:
        assert events == []
    else:
        assert events == [logged, (logged[0], "debug")]  # loud once, then quiet for its copies
    counts = {kind: metrics.rejected.labels(kind)._value.get() for kind in ("rejected", "security")}
    assert counts == {kind: (2.0 if kind == counted else 0.0) for kind in counts}
    assert stub_s3.requests == []  # nothing answered for a message not admitted
