"""`cfn-provider answer`: the operator's last-resort answer, on SQLite and on DynamoDB (moto over
HTTP). It PUTs to a real presigned S3 URL on moto, the store then says answered (so no daemon
answers again), and it is refused when the request was already answered, held under a live lease
(unless --force), unconfirmed, unknown, outside the URL allowlist, or not confirmed. With
--from-dlq the request comes from a real SQS dead-letter queue, which keeps its message."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from cfn_provider.cli import main
from cfn_provider.dialects.base import CLOUDFORMATION
from cfn_provider.dialects.ros import ROS
from cfn_provider.local.emulator import Emulator, Provider, Stack, key_of
from cfn_provider.ops.answer import owner
from cfn_provider.pipeline.request import idempotency_key, parse, stored_form, stored_parts
from cfn_provider.pipeline.response import TIMED_OUT_PREFIX
from tests.dialects.conftest import ros_request
from tests.support.aws import exhaust
from tests.support.egress import EgressGuard
from tests.support.sns_signing import CertServer, Signer


def digest(request: dict[str, Any]) -> str:
    return hashlib.sha256(request["ResponseURL"].encode()).hexdigest()


def key(request: dict[str, Any]) -> str:
    return idempotency_key(request["StackId"], request["RequestId"])


def claimed(
    in_store, request: dict[str, Any], lease: float = 60, ago: float = 120, token: str = "daemon-token"
) -> None:
    """A daemon's claim on `request` (stored with it), `ago` seconds back: lapsed by default."""
    in_store(
        lambda s: s.claim(
            key(request), "dead-daemon", digest(request), lease, token=token, request=json.dumps(request)
        ),
        ago=ago,
    )


def answer(
    state_url: str, emulator: Emulator, request: dict[str, Any], *args: str, allow: bool = True, yes: bool = True
) -> Any:
    argv = ["answer", request["StackId"], request["RequestId"], "--state", state_url, *args]
    argv += ["--allow-response-url", emulator.endpoint + "/"] if allow else []
    argv += ["--yes"] if yes else []
    return CliRunner().invoke(main, argv)


def fail(state_url, emulator, request, *args: str, **kw: Any) -> Any:
    return answer(state_url, emulator, request, "--status", "FAILED", "--reason", "operator: gave up", *args, **kw)


def s3_body(stack: Stack, request: dict[str, Any]) -> bytes | None:
    s3 = stack.provider.emulator.client("s3")
    bucket, object_key = key_of(request["ResponseURL"])
    try:
        return s3.get_object(Bucket=bucket, Key=object_key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None


def test_a_request_held_by_a_dead_daemon_is_answered_and_recorded(state_url, in_store, emulator, stack):
    request = stack.request("Create", "Hung")
    claimed(in_store, request)
    result = fail(state_url, emulator, request)
    assert result.exit_code == 0, result.output
    assert "answered FAILED" in result.output
    assert "?<redacted>" in result.output and "Signature" not in result.output  # the URL, shown redacted

    sent = json.loads(s3_body(stack, request))
    assert sent["Status"] == "FAILED" and sent["Reason"] == "operator: gave up"
    assert (sent["StackId"], sent["RequestId"], sent["LogicalResourceId"]) == (
        request["StackId"],
        request["RequestId"],
        "Hung",
    )
    assert sent["PhysicalResourceId"].startswith(TIMED_OUT_PREFIX)  # its rollback Delete reaches the handler

    record = in_store(lambda s: s.get(key(request)))
    assert record.state == "SENT" and record.status == "FAILED" and record.answered(digest(request))
    assert record.owner == owner() and json.loads(record.body) == sent


def test_the_daemon_finds_it_answered_afterwards(state_url, in_store, emulator, stack):
    """What a redelivery meets: the claim is refused and the record says this URL is answered."""
    request = stack.request("Create", "Hung")
    claimed(in_store, request)
    assert fail(state_url, emulator, request).exit_code == 0
    claim = in_store(lambda s: s.claim(key(request), "daemon-2", digest(request), 60, token="later"))
    assert not claim.acquired and claim.record.answered(digest(request))


def test_refused_when_already_answered(state_url, in_store, emulator, stack):
    request = stack.request("Create", "Done")
    claimed(in_store, request)
    assert fail(state_url, emulator, request).exit_code == 0
    stack.provider.emulator.client("s3").put_object(
        Bucket=stack.provider.bucket, Key=key_of(request["ResponseURL"])[1], Body=b"sentinel"
    )
    result = answer(state_url, emulator, request, "--status", "SUCCESS")
    assert result.exit_code == 1 and "already answered: FAILED" in result.output
    assert s3_body(stack, request) == b"sentinel"  # nothing more was PUT


def test_refused_while_a_daemon_holds_it_unless_forced(state_url, in_store, emulator, stack):
    request = stack.request("Update", "Busy", physical_id="busy-1")
    claimed(in_store, request, lease=600, ago=0)
    result = fail(state_url, emulator, request)
    assert result.exit_code == 1 and "held by dead-daemon" in result.output and "--force" in result.output
    assert s3_body(stack, request) is None and in_store(lambda s: s.get(key(request))).state == "CLAIMED"

    result = answer(state_url, emulator, request, "--status", "SUCCESS", "--force")
    assert result.exit_code == 0, result.output
    assert "TAKING OVER" in result.output
    sent = json.loads(s3_body(stack, request))
    assert sent["Status"] == "SUCCESS" and sent["PhysicalResourceId"] == "busy-1"  # an Update keeps its id
    # the holder, when its handler returns, finds its claim lost and cannot store (so never sends) its answer
    assert not in_store(lambda s: s.save_response(key(request), "daemon-token", "SUCCESS", b"{}"))
    assert in_store(lambda s: s.get(key(request))).state == "SENT"


def polling(
    in_store,
    request: dict[str, Any],
    deadline_in: float,
    physical_id: str | None = "snap-7",
    held_for: float | None = None,
) -> None:
    """A daemon's long-running request: POLLING with a PollState (deadline `deadline_in` s from now),
    its next poll a minute away; `held_for`: a poll step holds it that long (taken when due)."""
    from cfn_provider.pipeline.poll_steps import PollState

    state = PollState({"Operation": "op-1"}, physical_id, time.time() + deadline_in, 1, time.time() - 60).dumps()

    async def calls(store) -> None:
        assert (
            await store.claim(
                key(request), "daemon", digest(request), 60, token="daemon-token", request=json.dumps(request)
            )
        ).acquired
        assert await store.save_progress(key(request), "daemon-token", state, time.time() + (-1 if held_for else 60))
        if held_for:
            assert await store.take_poll(key(request), "stuck-daemon", held_for, token="step-token") is not None

    in_store(calls)


def test_a_long_running_request_is_refused_without_force_and_ended_failed_with_it(state_url, in_store, emulator, stack):
    """Its record drives it (the queue message is gone): without --force it is left to its polls; with
    --force, while no step holds it, it is answered FAILED with the id its action gave, and its
    polling ends: no daemon finds it due again."""
    request = stack.request("Create", "Slow")
    polling(in_store, request, deadline_in=3000)
    result = fail(state_url, emulator, request)
    assert result.exit_code == 1 and "long-running" in result.output and "--force" in result.output
    assert s3_body(stack, request) is None and in_store(lambda s: s.get(key(request))).state == "POLLING"
    result = answer(state_url, emulator, request, "--status", "SUCCESS", "--force")
    assert result.exit_code == 1 and "--status FAILED only" in result.output and s3_body(stack, request) is None

    result = fail(state_url, emulator, request, "--force")
    assert result.exit_code == 0, result.output
    assert "ENDING A LONG-RUNNING REQUEST" in result.output
    sent = json.loads(s3_body(stack, request))
    assert sent["Status"] == "FAILED" and sent["PhysicalResourceId"] == "snap-7"  # the rollback Delete reaches it
    record = in_store(lambda s: s.get(key(request)))
    assert record.state == "SENT" and record.answered(digest(request))
    assert key(request) not in in_store(lambda s: s.due_polls(time.time() + 3600, 100))  # its polling has ended
    assert in_store(lambda s: s.take_poll(key(request), "daemon", 60, token="late")) is None


def test_a_poll_step_that_holds_it_is_waited_for_until_the_deadline_has_passed(state_url, in_store, emulator, stack):
    request = stack.request("Create", "Stepping")
    polling(in_store, request, deadline_in=3000, held_for=600)
    result = fail(state_url, emulator, request, "--force")
    assert result.exit_code == 1 and "a poll step holds it" in result.output and s3_body(stack, request) is None
    assert in_store(lambda s: s.get(key(request))).token == "step-token"

    stuck = stack.request("Create", "Stuck")
    polling(in_store, stuck, deadline_in=-10, held_for=600)  # a step that never ends, past the deadline
    result = fail(state_url, emulator, stuck, "--force")
    assert result.exit_code == 0, result.output
    assert json.loads(s3_body(stack, stuck))["Status"] == "FAILED"
    assert not in_store(lambda s: s.save_response(key(stuck), "step-token", "SUCCESS", b"{}"))  # the step lost it
    assert in_store(lambda s: s.get(key(stuck))).state == "SENT"


def test_refused_while_an_answer_is_stored_and_not_yet_confirmed(state_url, in_store, emulator, stack):
    request = stack.request("Create", "Ready")
    claimed(in_store, request, ago=0)
    assert in_store(lambda s: s.save_response(key(request), "daemon-token", "SUCCESS", b'{"Status":"SUCCESS"}'))
    result = fail(state_url, emulator, request, "--force")
    assert result.exit_code == 1 and "awaits delivery" in result.output and s3_body(stack, request) is None


def test_refused_without_a_terminal_to_confirm_on(state_url, in_store, emulator, stack):
    request = stack.request("Create", "Ask")
    claimed(in_store, request)
    result = fail(state_url, emulator, request, yes=False)
    assert result.exit_code == 1 and "--yes" in result.output
    assert s3_body(stack, request) is None
    record = in_store(lambda s: s.get(key(request)))
    assert record.state == "CLAIMED" and record.owner == "dead-daemon"  # nothing written


def test_refused_for_a_response_url_outside_the_allowlist(state_url, in_store, emulator, stack):
    request = stack.request("Create", "Elsewhere")
    claimed(in_store, request)
    result = fail(state_url, emulator, request, allow=False)
    assert result.exit_code == 1 and "rejected" in result.output and "--allow-response-url" in result.output
    assert s3_body(stack, request) is None and in_store(lambda s: s.get(key(request))).owner == "dead-daemon"


def test_a_stored_request_is_answered_by_its_own_dialects_rules(state_url, in_store, stub_s3):
    """Issue 21 item 1: the store keeps the dialect a request came in with (here ROS, from an MNS
    daemon), and `answer` follows it: POSTed as ROS wants, whatever `answer` itself would assume."""
    request = ros_request("Create", stub_s3.url("ops/ros"), stack_id="7c1f1c38-5d6b-4a34-9f38-2b6f5d0c0d11")
    stored = stored_form(parse(json.dumps(request), ROS))
    in_store(lambda s: s.claim(key(request), "dead-daemon", digest(request), 60, token="t", request=stored), ago=120)
    result = CliRunner().invoke(
        main,
        [
            "answer",
            request["StackId"],
            request["RequestId"],
            "--state",
            state_url,
            "--status",
            "FAILED",
            "--reason",
            "operator: gave up",
            "--yes",
            "--allow-response-url",
            stub_s3.base_url,
        ],
    )
    assert result.exit_code == 0, result.output
    [post] = stub_s3.requests_for("ops/ros", "POST")
    assert post.header("Content-Type") == ["application/json"] and post.header("Date")
    assert json.loads(post.body)["Status"] == "FAILED" and not stub_s3.requests_for("ops/ros", "PUT")


def test_a_ros_field_in_a_cloudformation_record_changes_nothing(state_url, in_store, emulator, stack, monkeypatch):
    """A record written by an SQS daemon (here in the form written before dialects were stored)
    whose request carries StackName and an OSS ResponseURL: CloudFormation's rules, so refused, and
    nothing is sent anywhere (an egress guard sees every connection and name lookup)."""
    request = stack.request("Update", "Db", physical_id="prod-Db-1")
    request.update(
        StackName="prod",  # (an expiry, so that a version that did try gives up soon)
        ResponseURL=f"https://loot.oss-cn-hangzhou.aliyuncs.com/k?Expires={int(time.time()) + 5}&Signature=x",
    )
    claimed(in_store, request)  # json.dumps(request): the bare form
    guard = EgressGuard({urlsplit(emulator.endpoint).port})
    guard.install(monkeypatch)
    result = fail(state_url, emulator, request)
    assert result.exit_code == 1 and "rejected" in result.output and "loot.oss-cn-hangzhou" in result.output
    assert guard.attempts == []


def test_refused_when_no_response_url_is_known(state_url, in_store, emulator, stack):
    request = stack.request("Create", "Unknown")
    result = fail(state_url, emulator, request)
    assert result.exit_code == 1 and "no record" in result.output and "--from-dlq" in result.output
    in_store(lambda s: s.claim(key(request), "old-daemon", digest(request), 60, token="t"), ago=120)  # no request
    result = fail(state_url, emulator, request)
    assert result.exit_code == 1 and "no ResponseURL is known" in result.output
    assert s3_body(stack, request) is None


def test_a_failed_answer_needs_a_reason(state_url, emulator, stack):
    result = answer(state_url, emulator, stack.request("Create", "X"), "--status", "FAILED")
    assert result.exit_code == 2 and "--reason" in result.output


# --- from the dead-letter queue ------------------------------------------------------------
@pytest.fixture
def dl_stack(emulator: Emulator) -> Stack:
    return Stack(Provider.create(emulator, dlq=True, max_receive_count=1))


@pytest.fixture
def signer(dl_stack: Stack) -> Iterator[Signer]:
    """Signed notifications from the stack's topic, their certificate on a local server."""
    with CertServer() as certs:
        yield Signer(dl_stack.provider, certs)


def from_dlq(signer: Signer, *topics: str) -> list[str]:
    """The options that find and check a request in the DLQ as the daemon would: its queue, its topic
    (or `topics`), and the local server signing certificates come from."""
    return [
        "--from-dlq",
        "--queue-url",
        signer.provider.queue_url,
        *[a for t in (topics or (signer.provider.topic_arn,)) for a in ("--topic-arn", t)],
        "--trust-signing-cert-url",
        signer.cert_url.rsplit("/", 1)[0] + "/",
    ]


def dead_letter(signer: Signer, request: dict[str, Any], **envelope: Any) -> None:
    """`request` as SNS delivers it (signed, from the topic), its receives spent until SQS moves it to
    the dead-letter queue."""
    exhaust(signer.provider, [signer.body(request, **envelope)])


def test_a_request_in_the_dead_letter_queue_is_answered_from_there_and_left_there(
    state_url, in_store, emulator, dl_stack, signer
):
    other, request = dl_stack.request("Create", "Other"), dl_stack.request("Create", "Lost")
    dead_letter(signer, other)
    dead_letter(signer, request)
    result = fail(state_url, emulator, request, *from_dlq(signer))
    assert result.exit_code == 0, result.output
    assert "from the dead-letter queue" in result.output

    sent = json.loads(s3_body(dl_stack, request))
    assert sent["Status"] == "FAILED" and sent["LogicalResourceId"] == "Lost"
    assert s3_body(dl_stack, other) is None  # only the one named
    record = in_store(lambda s: s.get(key(request)))
    assert record.state == "SENT" and record.answered(digest(request))
    wire, dialect = stored_parts(record.request)
    assert wire["LogicalResourceId"] == "Lost" and dialect is CLOUDFORMATION  # recorded: `requests` shows it

    sqs = emulator.client("sqs")  # both messages are still there, visible (read, never deleted)
    bodies = []
    for _ in range(5):
        batch = sqs.receive_message(
            QueueUrl=dl_stack.provider.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=0
        ).get("Messages", [])
        bodies += [m["Body"] for m in batch]
        if len({b for b in bodies}) == 2:
            break
    assert any(request["RequestId"] in b for b in bodies) and any(other["RequestId"] in b for b in bodies)

    again = fail(state_url, emulator, request, *from_dlq(signer))
    assert again.exit_code == 1 and "already answered" in again.output


@pytest.mark.parametrize("forgery", ["unsigned", "tampered", "foreign-topic", "foreign-url"])
def test_a_message_that_fails_the_daemons_checks_is_never_answered_from_the_dead_letter_queue(
    state_url, in_store, emulator, dl_stack, signer, stub_s3, forgery
):
    """What the daemon would reject (no signature, a changed message, another topic, a ResponseURL
    outside the allowlist) never decides where the operator's answer goes: nothing is sent."""
    request = dl_stack.request("Create", "Forged")
    if forgery == "unsigned":
        dead_letter(signer, request, sign=False)
    elif forgery == "tampered":
        envelope = signer.envelope(request)
        envelope["Message"] = envelope["Message"].replace("Forged", "Forget")
        exhaust(signer.provider, [json.dumps(envelope)])
    elif forgery == "foreign-topic":
        dead_letter(signer, request, topic_arn=dl_stack.provider.topic_arn + "-other")
    else:
        request["ResponseURL"] = stub_s3.url("collect")  # a host outside the allowlist
        dead_letter(signer, request)
    result = fail(state_url, emulator, request, *from_dlq(signer))
    assert result.exit_code == 1 and "passes the checks a daemon makes" in result.output, result.output
    assert in_store(lambda s: s.get(key(request))) is None and stub_s3.requests == []
    if forgery != "foreign-url":
        assert s3_body(dl_stack, request) is None


def test_two_different_messages_for_one_request_are_listed_and_refused(state_url, in_store, emulator, dl_stack, signer):
    """Anyone who may publish to the topic (every stack deployer) can sign a copy of a victim's
    request with their own ResponseURL and PhysicalResourceId: the operator is shown both and
    chooses; the first one found never wins."""
    request = dl_stack.request("Update", "Victim", physical_id="victim-1")
    forged = {
        **request,
        "PhysicalResourceId": "attacker-9",
        "ResponseURL": dl_stack.response_url(f"{dl_stack.name}/attacker/{request['RequestId']}"),
    }
    dead_letter(signer, forged)
    dead_letter(signer, request)
    dead_letter(signer, request)  # SNS delivered it twice: copies of one request are one
    result = fail(state_url, emulator, request, *from_dlq(signer))
    assert result.exit_code == 1 and "2 different messages" in result.output, result.output
    assert "victim-1" in result.output and "attacker-9" in result.output and "X-Amz-Signature" not in result.output
    assert s3_body(dl_stack, request) is None and s3_body(dl_stack, forged) is None
    assert in_store(lambda s: s.get(key(request))) is None


def test_a_request_not_in_the_dead_letter_queue_is_reported(state_url, emulator, dl_stack, signer):
    request = dl_stack.request("Create", "Nowhere")
    result = fail(state_url, emulator, request, *from_dlq(signer))
    assert result.exit_code == 1 and "is not in" in result.output


# --- confirmation on a terminal ------------------------------------------------------------------
def on_a_terminal(argv: list[str], reply: str, emulator: Emulator, timeout: float = 30.0) -> tuple[int, str]:
    """Run `cfn-provider *argv` with a pseudo-terminal as its stdin and stdout; type `reply` at the
    confirmation question. (exit code, everything it wrote)."""
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    env = {**os.environ, **emulator.env()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cfn_provider", *argv],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        close_fds=True,
    )
    os.close(follower)
    seen, asked = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            if not asked and b"Send this answer?" in seen:
                os.write(leader, reply.encode() + b"\n")
                asked = True
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), seen.decode("utf-8", "replace")
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("reply", ["y", "n"])
def test_on_a_terminal_it_asks_first(state_url, in_store, emulator, stack, reply):
    request = stack.request("Create", "Asked")
    claimed(in_store, request)
    code, output = on_a_terminal(
        [
            "answer",
            request["StackId"],
            request["RequestId"],
            "--status",
            "FAILED",
            "--reason",
            "by hand",
            "--state",
            state_url,
            "--allow-response-url",
            emulator.endpoint + "/",
        ],
        reply,
        emulator,
    )
    assert "Send this answer?" in output and "answer:   FAILED" in output
    if reply == "y":
        assert code == 0, output
        assert json.loads(s3_body(stack, request))["Reason"] == "by hand"
        assert in_store(lambda s: s.get(key(request))).state == "SENT"
    else:
        assert code == 1 and "not confirmed" in output, output
        assert s3_body(stack, request) is None
        assert in_store(lambda s: s.get(key(request))).owner == "dead-daemon"


def test_a_request_asked_again_after_a_failed_answer_can_be_answered_from_the_dead_letter_queue(
    state_url, in_store, emulator, dl_stack, signer
):
    """The store's FAILED went to an earlier ResponseURL; the copy in the DLQ names a new one."""
    request = dl_stack.request("Create", "Again")
    earlier = {**request, "ResponseURL": dl_stack.response_url("earlier-url")}

    async def failed_earlier(store) -> None:
        await store.claim(key(request), "daemon", digest(earlier), 60, token="t", request=json.dumps(earlier))
        assert await store.save_response(key(request), "t", "FAILED", b'{"Status":"FAILED"}')
        await store.mark_sent(key(request), digest(earlier), "t")

    in_store(failed_earlier, ago=120)
    assert "already answered" in fail(state_url, emulator, request).output  # the store's request: answered
    dead_letter(signer, request)
    result = answer(
        state_url, emulator, request, "--status", "SUCCESS", "--physical-id", "made-by-hand", *from_dlq(signer)
    )
    assert result.exit_code == 0, result.output
    assert json.loads(s3_body(dl_stack, request))["PhysicalResourceId"] == "made-by-hand"
    record = in_store(lambda s: s.get(key(request)))
    assert record.state == "SENT" and record.answered(digest(request)) and record.answered(digest(earlier))


def test_a_named_tenants_request_is_answered_with_tenant_and_shown_with_it(state_url, in_store, stub_s3):
    """A web tenant's record is keyed under its name: `requests` shows the tenant, and `answer --tenant`
    reaches the record (without it: the default tenant's, where there is none)."""
    request = ros_request("Create", stub_s3.url("ops/tenant"), stack_id="1b7c1c38-5d6b-4a34-9f38-2b6f5d0c0d12")
    parsed = replace(parse(json.dumps(request), ROS), principal="team-a")
    in_store(
        lambda s: s.claim(parsed.key, "dead", digest(request), 60, token="t", request=stored_form(parsed)), ago=120
    )
    listed = CliRunner().invoke(main, ["requests", "--state", state_url, "--json"])
    assert listed.exit_code == 0 and [r["tenant"] for r in json.loads(listed.output)] == ["team-a"], listed.output
    argv = ["answer", request["StackId"], request["RequestId"], "--state", state_url, "--status", "FAILED"]
    argv += ["--reason", "operator: gave up", "--yes", "--allow-response-url", stub_s3.base_url]
    missing = CliRunner().invoke(main, argv)
    assert missing.exit_code == 1 and not stub_s3.requests
    result = CliRunner().invoke(main, [*argv, "--tenant", "team-a"])
    assert result.exit_code == 0, result.output
    [post] = stub_s3.requests_for("ops/tenant", "POST")
    assert json.loads(post.body)["Status"] == "FAILED"
    record = in_store(lambda s: s.get(parsed.key))
    assert record is not None and record.state == "SENT"
