"""cfn_provider.pipeline.tenancy through the real Worker on a queue: a topic's tenant reaches only its own
stacks and handlers (issue 28 item 1, the queue transports' side; the web listener's is
tests/intake/test_web_tenants.py).

Requests arrive as SNS notifications of three topics (signatures off: the signature path has its own
tests) on a MemoryQueue, into a real SQLite store, answered to a StubS3: topic A is tenant team-a's,
topic B team-b's, topic C no tenant's (so `default`'s).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from cfn_provider.pipeline.disposition import Disposition
from cfn_provider.pipeline.heartbeat import Heartbeat
from cfn_provider.pipeline.responder import Responder
from cfn_provider.pipeline.router import Router
from cfn_provider.pipeline.worker import Policy, Worker
from cfn_provider.stores.sqlite import SQLiteStore
from cfn_provider.transports.memory import MemoryQueue
from cfn_provider.trust.tenants import TenantError, Tenants, config_options, from_options
from cfn_provider.trust.urls import ResponseUrlPolicy
from tests.support.stub_s3 import StubS3

TOPIC = "arn:aws:sns:us-east-1:123456789012:"
A, B, C = TOPIC + "team-a", TOPIC + "team-b", TOPIC + "shared"


class Thing:
    def __init__(self) -> None:
        self.ran: list[str] = []

    async def create(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.ran.append(event["RequestId"])
        return {"PhysicalResourceId": f"thing-{context.principal}", "Data": {"Secret": f"of-{context.principal}"}}

    update = create

    async def delete(self, event: dict[str, Any], context: Any) -> None:
        self.ran.append(event["RequestId"])


class Setup:
    def __init__(self, queue: MemoryQueue, worker: Worker, thing: Thing, s3: StubS3) -> None:
        self.queue, self.worker, self.thing, self.s3 = queue, worker, thing, s3

    def request(self, **fields: Any) -> dict[str, Any]:
        request_id = str(uuid.uuid4())
        return {
            "RequestType": "Create",
            "ResponseURL": self.s3.url(f"responses/{request_id}"),
            "StackId": f"arn:aws:cloudformation:us-east-1:123456789012:stack/s/{uuid.uuid4()}",
            "RequestId": request_id,
            "LogicalResourceId": "Thing",
            "ResourceType": "Custom::Thing",
            "ResourceProperties": {},
            **fields,
        }

    async def send(self, topic: str, request: dict[str, Any], dead_letter: bool = False) -> Disposition:
        self.queue.send(
            json.dumps(
                {
                    "Type": "Notification",
                    "MessageId": str(uuid.uuid4()),
                    "TopicArn": topic,
                    "Message": json.dumps(request),
                    "Timestamp": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                }
            )
        )
        (message,) = await self.queue.receive(1, 0, 30)
        heartbeat = Heartbeat(self.queue, message, 30)
        if dead_letter:
            return await self.worker.answer_dead_letter(message, heartbeat, "the-dlq")
        return await self.worker.process(message, heartbeat)

    def answers(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        return [json.loads(b) for b in self.s3.bodies(f"responses/{request['RequestId']}")]


@pytest.fixture
async def setup(tmp_path: Path, stub_s3: StubS3) -> AsyncIterator[Setup]:
    thing, other = Thing(), Thing()
    store = SQLiteStore(tmp_path / "state.db")
    executor = ThreadPoolExecutor(max_workers=2)
    tenants = from_options(
        ["team-a=Custom::Thing", "team-b=Custom::Other"], [f"team-a={A}", f"team-b={B}"]
    )  # C: no tenant's
    async with aiohttp.ClientSession() as http:
        worker = Worker(
            router=Router([("Custom::Thing", thing), ("Custom::Other", other)], use_entry_points=False),
            store=store,
            responder=Responder(http, max_backoff=0.1),
            url_policy=ResponseUrlPolicy((stub_s3.base_url,)),
            verifier=None,
            policy=Policy(verify_signatures=False, lease_seconds=60, tenants=tenants),
            executor=executor,
            owner="worker-under-test",
        )
        yield Setup(MemoryQueue(), worker, thing, stub_s3)
    await store.close()
    executor.shutdown(wait=False)


async def test_another_topics_request_for_a_tenants_stack_is_forged_and_never_run(setup: Setup):
    victim = setup.request()
    assert await setup.send(A, victim) is Disposition.DELETE
    assert setup.answers(victim)[0]["Data"] == {"Secret": "of-team-a"}  # the handler saw its principal

    ids = {k: victim[k] for k in ("StackId", "LogicalResourceId")}
    forged = [
        (B, setup.request(RequestType="Update", PhysicalResourceId="thing-team-a", **ids)),
        (C, setup.request(RequestType="Delete", PhysicalResourceId="thing-team-a", **ids)),
        (B, victim | {"ResponseURL": setup.s3.url(f"responses/{uuid.uuid4()}")}),  # a known RequestId
    ]
    with capture_logs() as logs:
        for topic, request in forged:
            assert await setup.send(topic, request) is Disposition.REJECT  # left for the dead-letter queue
        for topic, request in forged:  # and from there: never answered either
            assert await setup.send(topic, request, dead_letter=True) is Disposition.REJECT
    security = [e for e in logs if e.get("event") == "security"]
    assert len(security) == 2 * len(forged) and all("another principal" in e["reason"] for e in security)
    assert setup.thing.ran == [victim["RequestId"]]
    assert [r.key for r in setup.s3.requests] == [f"responses/{victim['RequestId']}"]


async def test_a_tenant_is_answered_no_handler_for_a_type_it_was_not_given(setup: Setup):
    theirs = setup.request()
    assert await setup.send(B, theirs) is Disposition.DELETE
    (answer,) = setup.answers(theirs)
    assert (answer["Status"], answer["Reason"]) == ("FAILED", "no handler for Custom::Thing")
    mine = setup.request(ResourceType="Custom::Other")
    assert await setup.send(B, mine) is Disposition.DELETE and setup.answers(mine)[0]["Status"] == "SUCCESS"
    default = setup.request()  # topic C: `default`, given no list, gets every handler served
    assert await setup.send(C, default) is Disposition.DELETE
    assert setup.answers(default)[0]["Data"] == {"Secret": "of-default"}
    assert setup.thing.ran == [default["RequestId"]]


def test_the_config_table_and_its_mistakes():
    handlers, topics = config_options(
        {"team-a": {"handlers": ["Custom::A", "Custom::B*"], "topics": [A]}, "team-b": {"handlers": []}}, "c.toml"
    )
    tenants = from_options(handlers, topics)
    assert tenants.of_topic(A) == "team-a" and tenants.of_topic(B) == "default" and tenants.of_topic(None) == "default"
    assert tenants.allows("team-a", "Custom::Bee") and not tenants.allows("team-a", "Custom::C")
    assert not tenants.allows("team-b", "Custom::A") and not tenants.allows("team-b", "-")  # given none
    assert Tenants().allows("anyone", "Custom::A")
    for table in ([], {"bad name": {}}, {"t": {"handler": ["x"]}}, {"t": {"handlers": "Custom::A"}}):
        with pytest.raises(TenantError, match="c.toml"):
            config_options(table, "c.toml")
    with pytest.raises(TenantError, match="two tenants"):
        from_options([], [f"a={A}", f"b={A}"])
    with pytest.raises(TenantError, match="NAME=TYPE"):
        from_options(["team-a"], [])
