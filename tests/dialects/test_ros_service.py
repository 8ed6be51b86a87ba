"""End to end on transport mns: `Service(Settings(transport="mns", ...))` against the local MNS server,
answering ROS-shaped requests to a local response endpoint (StubS3 records the POSTs)."""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import socket
import time
from typing import Any

import pytest

from tests.dialects import handlers as ros_handlers
from tests.dialects.conftest import QUEUE, JsonLog, ros_request
from tests.support import handlers
from tests.support.mns_server import MnsClient, MnsServer, notification_json, notification_xml
from tests.support.stub_s3 import StubS3

ARN = "arn:aws:cloudformation:us-east-1:123456789012:stack/cfn/5b918d10-cd98-11ea-90d5-0a9cd3354c10"


async def answer(s3: StubS3, key: str, method: str = "POST", timeout: float = 20.0) -> Any:
    """The request (method, headers, body) that delivered `key`'s answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [r for r in s3.requests_for(key, method) if r.ok]
        if done:
            return done[-1]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {method} of {key}; saw {[(r.method, r.key, r.status) for r in s3.requests]}")


def send(mns: MnsServer, body: dict[str, Any] | str, form: str = "bare") -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    wrapped = {
        "bare": text,
        "base64": base64.b64encode(text.encode()).decode(),
        "json": notification_json(text),
        "xml": notification_xml(text),
    }[form]
    MnsClient(mns).send_message(QUEUE, wrapped)


async def settled(mns: MnsServer, timeout: float = 10.0) -> None:
    """Every message deleted (the poller disposes of it just after the response)."""
    assert await asyncio.to_thread(mns.wait_until, lambda: not mns.queue(QUEUE).live, timeout)


async def test_create_update_delete(ros_daemon, mns_env: MnsServer, stub_s3: StubS3):
    await ros_daemon()
    create = ros_request("Create", stub_s3.url("ros/create"), props={"Size": "1"})
    send(mns_env, create)
    posted = await answer(stub_s3, "ros/create")
    assert posted.header("Content-Type") == ["application/json"]
    stamp = email.utils.parsedate_to_datetime(posted.header("Date")[0])
    assert posted.header("Date")[0].endswith(" GMT") and abs(stamp.timestamp() - time.time()) < 60
    assert len(posted.body) <= 4096
    created = json.loads(posted.body)
    assert created["Status"] == "SUCCESS" and "NoEcho" not in created
    assert {k: created[k] for k in ("StackId", "RequestId", "LogicalResourceId")} == {
        k: create[k] for k in ("StackId", "RequestId", "LogicalResourceId")
    }
    pid = created["PhysicalResourceId"]
    assert pid.startswith("ros-stack-Thing-") and len(pid.encode()) <= 255

    update = ros_request(
        "Update",
        stub_s3.url("ros/update"),
        stack_id=create["StackId"],
        physical_id=pid,
        props={"Size": "2"},
        old_props={"Size": "1"},
    )
    send(mns_env, update, "base64")
    updated = json.loads((await answer(stub_s3, "ros/update")).body)
    assert (updated["Status"], updated["PhysicalResourceId"]) == ("SUCCESS", pid)

    delete = ros_request(
        "Delete", stub_s3.url("ros/delete"), stack_id=create["StackId"], physical_id=pid, props={"Size": "2"}
    )
    send(mns_env, delete, "xml")
    deleted = json.loads((await answer(stub_s3, "ros/delete")).body)
    assert (deleted["Status"], deleted["PhysicalResourceId"]) == ("SUCCESS", pid)
    await settled(mns_env)
    ours = {create["RequestId"], update["RequestId"], delete["RequestId"]}  # calls is the process's: an
    # earlier test's abandoned handler thread may still finish into it (the CI rehearsal saw two)
    assert [kind for rid, kind in handlers.calls if rid in ours] == ["Create", "Update", "Delete"]
    assert not stub_s3.requests_for("ros/create", "PUT")


async def test_update_that_changes_the_id_fails(ros_daemon, mns_env: MnsServer, stub_s3: StubS3):
    await ros_daemon()
    update = ros_request(
        "Update",
        stub_s3.url("ros/replace"),
        physical_id="thing-1",
        props={"ReturnJson": json.dumps({"PhysicalResourceId": "thing-2"})},
    )
    send(mns_env, update, "json")
    doc = json.loads((await answer(stub_s3, "ros/replace")).body)
    assert doc["Status"] == "FAILED" and doc["PhysicalResourceId"] == "thing-1"
    assert "ROS cannot replace a custom resource" in doc["Reason"] and "'thing-2'" in doc["Reason"]


@pytest.mark.parametrize("props, budget", [({}, 60), ({"Timeout": "300"}, 300)])
async def test_deadline_follows_timeout(ros_daemon, mns_env: MnsServer, stub_s3: StubS3, props, budget):
    ros_handlers.remaining.clear()
    await ros_daemon()
    send(mns_env, ros_request("Create", stub_s3.url("ros/timeout"), rtype="Custom::Remaining", props=props))
    await answer(stub_s3, "ros/timeout")
    [remaining] = ros_handlers.remaining
    kept = min(30.0, budget * 0.1)  # the margin kept back for answering
    assert budget - kept - 10 < remaining <= budget - kept


async def test_a_handler_overrunning_the_default_timeout_is_answered_in_time(ros_daemon, mns_env, stub_s3):
    await ros_daemon()
    send(mns_env, ros_request("Create", stub_s3.url("ros/slow"), props={"Timeout": "3", "SleepSeconds": "10"}))
    started = time.monotonic()
    doc = json.loads((await answer(stub_s3, "ros/slow")).body)
    assert doc["Status"] == "FAILED" and "timed out" in doc["Reason"] and time.monotonic() - started < 9


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_auto_tries_intranet_then_public(ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog):
    port = closed_port()
    intranet = f"http://127.0.0.1:{port}/ros/intranet?Signature=abc"
    await ros_daemon(
        alibaba_cloud=True, ros_response_url="auto", allow_response_urls=(stub_s3.base_url, f"http://127.0.0.1:{port}/")
    )
    send(mns_env, ros_request("Create", stub_s3.url("ros/public"), intranet=intranet))
    assert json.loads((await answer(stub_s3, "ros/public")).body)["Status"] == "SUCCESS"
    await settled(mns_env)  # the request line is written before the message is deleted
    [fallback] = json_log.events(event="response.fallback")
    assert fallback["url"].startswith(f"http://127.0.0.1:{port}/ros/intranet?<redacted>")
    assert fallback["dialect"] == "ros"
    [line] = json_log.events(event="request")
    assert line["delivered"] is True and line["attempts"] == 2


@pytest.mark.parametrize(
    "mode, inside, expect",
    [("intranet", False, "ros/in"), ("public", True, "ros/out"), ("auto", False, "ros/out"), ("auto", True, "ros/in")],
)
async def test_url_modes(ros_daemon, mns_env, stub_s3: StubS3, mode, inside, expect):
    await ros_daemon(alibaba_cloud=inside, ros_response_url=mode)
    send(mns_env, ros_request("Create", stub_s3.url("ros/out"), intranet=stub_s3.url("ros/in")))
    await answer(stub_s3, expect)
    await settled(mns_env)
    assert len([r for r in stub_s3.requests if r.method == "POST"]) == 1


async def test_redelivery_is_answered_once(ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog):
    await ros_daemon()
    create = ros_request("Create", stub_s3.url("ros/once"))
    send(mns_env, create)
    await answer(stub_s3, "ros/once")
    await settled(mns_env)
    send(mns_env, create, "json")  # the same StackId + RequestId again
    await settled(mns_env)
    assert handlers.count(create["RequestId"]) == 1
    assert [e["outcome"] for e in json_log.events(event="request")] == ["answered", "duplicate"]


async def test_a_cloudformation_looking_request_over_mns_is_ros(
    ros_daemon, mns_env, stub_s3: StubS3, json_log: JsonLog
):
    """The transport decides (issue 21 item 1): an ARN StackId and no ROS field change nothing on MNS."""
    await ros_daemon()
    req = {
        "RequestType": "Create",
        "ResponseURL": stub_s3.url("cfn/over-mns"),
        "StackId": ARN,
        "RequestId": "r-1",
        "LogicalResourceId": "Thing",
        "ResourceType": "Custom::Test",
        "ResourceProperties": {},
    }
    send(mns_env, req)
    post = await answer(stub_s3, "cfn/over-mns", "POST")
    assert post.header("Content-Type") == ["application/json"] and post.header("Date")
    await settled(mns_env)
    assert not stub_s3.requests_for("cfn/over-mns", "PUT")
    assert json_log.events(event="request")[0]["dialect"] == "ros"


ALLOWED_ONLY_BY_DEFAULT = "https://ros.cn-hangzhou.aliyuncs.com/callback?Signature=x"


async def test_hostile_items_are_logged_with_their_dialect(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog
):
    """Each item ends in one terminal line (rejected / security / request) naming the dialect."""
    await ros_daemon(alibaba_cloud=True)
    url = stub_s3.url
    cases: list[tuple[str, str, str, str]] = []  # (name, body, expected event, expected dialect)

    def add(name: str, body: str, event: str, dialect: str = "ros") -> None:
        cases.append((name, body, event, dialect))

    good = ros_request("Create", url("h/good"))
    add("not-json", "this is not json {", "rejected")
    add("xml-doctype", '<!DOCTYPE x [<!ENTITY a "b">]><Notification><Message>&a;</Message></Notification>', "rejected")
    add("xml-other", "<Messages><Message>{}</Message></Messages>", "rejected")
    add("base64-garbage", base64.b64encode(b"\xff\xfe\x00").decode(), "rejected")
    add("json-list", json.dumps([good]), "rejected")
    add("notification-without-message", notification_json("").replace('"Message": ""', '"Message": 5'), "rejected")
    add("missing-response-url", json.dumps({k: v for k, v in good.items() if k != "ResponseURL"}), "rejected")
    add("number-stack-id", json.dumps({**good, "StackId": 1.5, "RequestId": "n1"}), "rejected")
    add(
        "arn-missing-request-id",
        json.dumps({"StackId": ARN, "ResponseURL": url("h/x"), "LogicalResourceId": "L"}),
        "rejected",
    )  # an ARN changes nothing: MNS is ROS's
    add("url-metadata", json.dumps(ros_request("Create", "http://100.100.100.200/latest/meta-data/")), "security")
    add("url-not-aliyun", json.dumps(ros_request("Create", "https://evil.example/cb")), "security")
    add(
        "url-aliyun-lookalike",
        json.dumps(ros_request("Create", "https://ros.aliyuncs.com.evil.example/cb")),
        "security",
    )
    add(
        "intranet-metadata",
        json.dumps(ros_request("Create", url("h/i"), intranet="http://100.100.100.200/x")),
        "security",
    )
    add(
        "cfn-host-for-ros",
        json.dumps(ros_request("Create", "https://bucket.s3.amazonaws.com/k?X-Amz-Signature=a")),
        "security",
    )
    add(
        "resource-type-too-long", json.dumps(ros_request("Create", url("h/rt"), rtype="Custom::" + "x" * 61)), "request"
    )
    add("physical-id-too-long", json.dumps(ros_request("Update", url("h/pid"), physical_id="p" * 300)), "request")
    add("unknown-type", json.dumps(ros_request("Create", url("h/unknown"), rtype="Custom::Nobody")), "request")
    add("good", json.dumps(good), "request")
    for _, body, _, _ in cases:
        MnsClient(mns_env).send_message(QUEUE, body)
    await settled(mns_env, 40)
    terminal = [e for e in json_log.events() if e.get("event") in ("rejected", "security", "request")]
    assert len(terminal) == len(cases), [e["event"] for e in terminal]
    by_id = {m.id: m.body for m in mns_env.queue(QUEUE).messages}
    seen = {by_id[e["message_id"]]: e for e in terminal}
    for name, body, event, dialect in cases:
        line = seen[body]
        assert (line["event"], line["dialect"]) == (event, dialect), (name, line)
    assert not [r for r in stub_s3.requests if r.key in ("h/x", "h/i")]  # nothing sent for refused items
    for key in ("h/rt", "h/pid", "h/unknown"):
        assert json.loads((await answer(stub_s3, key)).body)["Status"] == "FAILED"
    assert len(json_log.events(event="message.deleted")) == 14  # no dead-letter queue: rejected ones deleted


async def test_secrets_never_logged(ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog):
    mns_env.fail_next("receive", 503, "ServiceUnavailable", times=2)
    await ros_daemon()
    send(mns_env, ros_request("Create", stub_s3.url("ros/secret"), props={"Raise": f"boom {mns_env.secret}"}))
    doc = json.loads((await answer(stub_s3, "ros/secret")).body)
    assert doc["Status"] == "FAILED"
    await settled(mns_env)
    text = json_log.text
    assert json_log.events(event="queue.receive_failed")  # the errors were logged ...
    assert json_log.events(event="started")[0]["transport"] == "mns"
    assert mns_env.secret not in text and "<redacted>" in text  # ... the secret never


async def test_a_request_left_in_the_mns_dead_letter_queue_is_answered_failed_once(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3
):
    # MNS's DlqPolicy names the dead-letter queue; the local server does not move messages itself,
    # so the test puts them there, as MNS does once MaxReceiveCount is spent
    mns_env.create_queue("ros-provider-dlq")
    mns_env.queue(QUEUE).dlq = {"Enabled": "true", "DeadLetterTargetQueue": "ros-provider-dlq", "MaxReceiveCount": "2"}
    stuck = ros_request("Create", stub_s3.url("ros/stuck"), props={"Size": "1"})
    client = MnsClient(mns_env)
    client.send_message("ros-provider-dlq", json.dumps(stuck))
    client.send_message("ros-provider-dlq", "not a request at all")
    await ros_daemon(dead_letter_interval=0.5)
    posted = await answer(stub_s3, "ros/stuck")
    doc = json.loads(posted.body)
    assert doc["Status"] == "FAILED" and "ros-provider-dlq" in doc["Reason"]
    assert doc["RequestId"] == stuck["RequestId"]
    assert handlers.started == []
    assert await asyncio.to_thread(mns_env.wait_until, lambda: len(mns_env.queue("ros-provider-dlq").live) == 1, 10)
    await asyncio.sleep(1.5)
    assert len(stub_s3.requests_for("ros/stuck", "POST")) == 1
    assert [m.body for m in mns_env.queue("ros-provider-dlq").live] == ["not a request at all"]  # left alone


# ---------------------------------------------------------------------------------- the MNS topic allowlist
TOPIC = "acs:mns:cn-hangzhou:1234567890:topics/ros-topic"  # notification_json / _xml's default topic


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_a_topic_allowlist_serves_only_its_topics_notifications(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog
):
    """Issue 21 item 9: with --mns-topic, a notification (JSON or XML, its Message raw or base64, the
    whole body base64) is served only from a listed topic; another topic of the account, another
    owner, and a bare message (not a notification) are security events: not run, nothing sent."""
    await ros_daemon(mns_topics=(TOPIC,))
    served, refused = {}, {}
    for name, wrap in {
        "json": notification_json,
        "xml": notification_xml,
        "json-b64-message": lambda m: notification_json(b64(m)),
        "xml-b64-message": lambda m: notification_xml(b64(m)),
        "b64-body": lambda m: b64(notification_json(m)),
    }.items():
        served[name] = ros_request("Create", stub_s3.url(f"topic/ok/{name}"))
        send(mns_env, wrap(json.dumps(served[name])))
    for name, wrap in {
        "other-topic": lambda m: notification_json(m, topic="other-topic"),
        "other-topic-xml": lambda m: notification_xml(m, topic="ros-topic-2"),
        "other-owner": lambda m: notification_json(m, owner="999999"),
        "bare": lambda m: m,
        "bare-b64": b64,
    }.items():
        refused[name] = ros_request("Create", stub_s3.url(f"topic/no/{name}"))
        send(mns_env, wrap(json.dumps(refused[name])))
    for name in served:
        assert json.loads((await answer(stub_s3, f"topic/ok/{name}")).body)["Status"] == "SUCCESS", name
    await settled(mns_env, 20)
    security = json_log.events(event="security")
    assert len(security) == len(refused), [e["reason"] for e in security]
    assert sum("not in the allowlist" in e["reason"] for e in security) == 3
    assert sum("bare MNS message" in e["reason"] for e in security) == 2
    assert not [r for r in stub_s3.requests if r.key.startswith("topic/no/")]
    ran = {rid for rid, _ in handlers.started}
    assert not ran & {r["RequestId"] for r in refused.values()}
    assert {r["RequestId"] for r in served.values()} <= ran


async def test_bare_messages_with_a_topic_allowlist_only_when_allowed(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog
):
    await ros_daemon(mns_topics=(TOPIC,), mns_allow_bare_messages=True)
    bare = ros_request("Create", stub_s3.url("bare/ok"))
    foreign = ros_request("Create", stub_s3.url("bare/foreign"))
    send(mns_env, bare, "base64")
    send(mns_env, notification_json(json.dumps(foreign), topic="elsewhere"))
    assert json.loads((await answer(stub_s3, "bare/ok")).body)["Status"] == "SUCCESS"
    await settled(mns_env)
    [refusal] = json_log.events(event="security")
    assert "acs:mns::1234567890:topics/elsewhere" in refusal["reason"] and "not in the allowlist" in refusal["reason"]
    assert not stub_s3.requests_for("bare/foreign", "POST")


async def test_without_a_topic_allowlist_any_topic_and_bare_messages_are_served_with_a_warning(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog
):
    await ros_daemon()
    for name, body in {"bare": lambda m: m, "other-topic": lambda m: notification_json(m, topic="any")}.items():
        send(mns_env, body(json.dumps(ros_request("Create", stub_s3.url(f"open/{name}")))))
        assert json.loads((await answer(stub_s3, f"open/{name}")).body)["Status"] == "SUCCESS"
    assert json_log.events(event="topics_unrestricted")
    [trust] = json_log.events(event="mns_trust")
    assert trust["topics"] == [] and trust["bare_messages"] is True


async def test_an_sns_envelope_on_mns_is_not_a_message(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog
):
    """The transport decides the message forms too: an SNS envelope (whose TopicArn could name an
    allowed topic) is no MNS message."""
    await ros_daemon(mns_topics=(TOPIC,))
    req = ros_request("Create", stub_s3.url("sns/on-mns"))
    send(
        mns_env,
        json.dumps(
            {
                "Type": "Notification",
                "MessageId": "m-1",
                "TopicArn": "acs:mns::1234567890:topics/ros-topic",
                "Message": json.dumps(req),
                "Timestamp": "2026-01-01T00:00:00.000Z",
            }
        ),
    )
    await settled(mns_env)
    [rejected] = json_log.events(event="rejected")
    assert "neither an MNS topic notification nor a request" in rejected["reason"]
    assert not stub_s3.requests_for("sns/on-mns", "POST")


async def test_a_poll_step_on_another_transports_daemon_keeps_the_requests_dialect(
    ros_daemon, run_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog
):
    """Issue 21 item 1, stored records: the store keeps each request with the dialect of the
    transport it came in on, so a fleet member on SQS that takes over a long-running ROS request
    (one store for both) answers it as ROS wants (POST), whatever the request looks like (here an
    ARN StackId and no ROS field)."""
    wait = (("Custom::Wait", None),)
    ros = await ros_daemon(handlers=wait, poll_interval=0.5)
    req = {
        "RequestType": "Create",
        "ResponseURL": stub_s3.url("poll/ros"),
        "StackId": ARN,
        "RequestId": "r-poll",
        "LogicalResourceId": "Pause",
        "ResourceType": "Custom::Wait",
        "ResourceProperties": {"Seconds": "4", "IntervalSeconds": "3"},
    }
    send(mns_env, req)
    deadline = time.monotonic() + 20
    while not [e for e in json_log.events(event="request") if e.get("outcome") == "polling"]:
        assert time.monotonic() < deadline, "the MNS daemon did not start polling"
        await asyncio.sleep(0.05)
    await ros.stop()
    assert not stub_s3.requests_for("poll/ros")  # still waiting: the SQS daemon finishes it
    await run_daemon(handlers=wait, poll_interval=0.5)  # the same state file
    post = await answer(stub_s3, "poll/ros", "POST", timeout=30)
    assert post.header("Content-Type") == ["application/json"] and post.header("Date")
    assert json.loads(post.body)["Status"] == "SUCCESS" and not stub_s3.requests_for("poll/ros", "PUT")
    [done] = [e for e in json_log.events(event="request") if e.get("outcome") == "answered"]
    assert done["dialect"] == "ros"
