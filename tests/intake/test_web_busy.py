"""Issue 29 item 4: more simultaneous web[sync] requests than a `lambda:` function's concurrency plus its
waiters, through the real HTTPS listener: each caller gets the function's own answer or 503 +
Retry-After, never a stored FAILED for being queued; a retry after 503 is run and gets the answer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cfn_provider.functions.settings import parse_options
from cfn_provider.pipeline.request import idempotency_key
from cfn_provider.stores import open_store
from tests.dialects.conftest import ros_request
from tests.support.stub_s3 import StubS3
from tests.support.web import WEB_HANDLERS, post

SLOW = Path(__file__).resolve().parents[1] / "support" / "lambda_functions" / "slow"
CALLERS = 5


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
async def test_sync_callers_of_a_busy_function_get_its_answer_or_503_and_a_retry_gets_the_answer(
    web_daemon, https, stub_s3: StubS3, tmp_path: Path
):
    d = await web_daemon(
        handlers=(*WEB_HANDLERS, ("Custom::Slow", "lambda:index.handler")),
        functions=parse_options([f"Custom::Slow=code={SLOW}", "Custom::Slow=concurrency=1"]),
        concurrency=CALLERS + 2,
    )
    requests = [
        ros_request("Create", stub_s3.url(f"busy/{i}"), rtype="Custom::Slow", props={"Name": f"n{i}"})
        for i in range(CALLERS)
    ]
    first = await asyncio.gather(*(post(https, d.url("sync"), req) for req in requests))
    busy = [(req, headers) for req, (status, headers, _) in zip(requests, first, strict=True) if status == 503]
    assert busy, "concurrency 1 and one waiter: some of five simultaneous callers must be told to retry"
    for req, (status, headers, body) in zip(requests, first, strict=True):
        if status == 503:
            assert int(headers["Retry-After"]) >= 1 and "busy" in json.loads(body)["Error"]
        else:
            assert status == 200 and _answered(req, body), body
    store = open_store(f"sqlite://{tmp_path}/state.db")
    try:  # nothing stored for a busy one: no FAILED kept, no claim left to refuse the retry
        for req, _ in busy:
            assert await store.get(idempotency_key(req["StackId"], req["RequestId"])) is None
    finally:
        await store.close()
    for req, headers in busy:  # the retries, one after another as a caller honouring Retry-After
        await asyncio.sleep(float(headers["Retry-After"]))
        status, _, body = await post(https, d.url("sync"), req)
        assert status == 200 and _answered(req, body), body


def _answered(req: dict, body: bytes) -> bool:
    doc = json.loads(body)
    name = req["ResourceProperties"]["Name"]
    return (doc["Status"], doc["PhysicalResourceId"], doc["Data"]) == ("SUCCESS", f"slow-{name}", {"Name": name})
