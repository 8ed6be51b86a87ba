"""`cfn-provider invoke`, as an operator types it, against daemons on the emulator: straight to the
topic (--response-bucket) and through CloudFormation (a stack on tests.support.cloudformation_api,
since moto's CloudFormation runs only Lambda-backed custom resources)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.local.emulator import Emulator, Provider
from cfn_provider.ops.invoke import PING_TYPE, Answer, InvokeError, parse_properties, verdict
from cfn_provider.ops.invoke_stack import ANSWERED
from tests.support.cloudformation_api import CloudFormationApi
from tests.support.daemons import REPO, SubprocessDaemon, recorded_calls, wait_for_event

pytestmark = pytest.mark.slow


def invoke(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cfn_provider", "invoke", "--poll-interval", "0.2", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def requests_of(daemon: SubprocessDaemon) -> list[dict[str, Any]]:
    return [e for e in daemon.events() if e.get("event") == "request"]


@pytest.fixture
def cloudformation(emulator: Emulator) -> Iterator[CloudFormationApi]:
    with CloudFormationApi(emulator) as api:
        yield api


# ---- reading answers -----------------------------------------------------------------------------


def test_a_reason_cloudformation_quotes_is_the_daemons_answer_anything_else_is_no_answer() -> None:
    quoted = (
        "Received response status [FAILED] from custom resource. Message returned: quota (per region) "
        "reached (RequestId: 0b6c-11)"
    )
    m = ANSWERED.match(quoted)
    assert m and (m["status"], m["reason"], m["request_id"]) == ("FAILED", "quota (per region) reached", "0b6c-11")
    assert (
        ANSWERED.match("CloudFormation did not receive a response from your Custom Resource. Please check ...") is None
    )
    assert ANSWERED.match("Custom Resource failed to stabilize in expected time.") is None


def test_verdict_wants_success_or_a_pings_no_handler_and_every_answer() -> None:
    ok = [Answer("Create", "SUCCESS"), Answer("Delete", "SUCCESS")]
    assert verdict(ok, "Custom::Echo")[0] == 0
    assert verdict([Answer("Create", "FAILED", "boom"), Answer("Delete", "SUCCESS")], "Custom::Echo")[0] == 1
    assert verdict([Answer("Create", "SUCCESS"), Answer("Delete", None)], "Custom::Echo")[0] == 2
    ping = [Answer("Create", "FAILED", f"no handler for {PING_TYPE}"), Answer("Delete", "SUCCESS")]
    assert verdict(ping, PING_TYPE)[0] == 0
    assert verdict(ok, PING_TYPE)[0] == 1  # something serves the ping type: not what a ping expects
    assert verdict([], "Custom::Echo")[0] == 2


def test_properties_are_strings_from_pairs_over_json_and_never_the_service_token() -> None:
    assert parse_properties(("A=1", "B=x=y"), '{"A": 0, "L": [1]}') == {"A": "1", "B": "x=y", "L": [1]}
    for pairs, as_json in [(("=v",), None), ((), "[1]"), ((), "{"), (("ServiceToken=arn",), None)]:
        with pytest.raises(InvokeError):
            parse_properties(pairs, as_json)


# ---- straight to the topic ------------------------------------------------------------------------


def test_straight_to_the_topic_a_served_type_gets_its_create_and_delete_answered(
    spawn, emulator: Emulator, provider: Provider
) -> None:
    daemon = spawn("d")
    result = invoke(
        "--topic-arn",
        provider.topic_arn,
        "--response-bucket",
        provider.bucket,
        "--resource-type",
        "Custom::Echo",
        "--property",
        "Colour=blue",
        "--property",
        "Name=thing-1",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"answers to {emulator.endpoint}/{provider.bucket}/cfn-provider-invoke/" in out
    assert "Create  SUCCESS after" in out and "PhysicalResourceId=thing-1" in out
    assert 'Data: {"Colour": "blue"}' in out
    assert "Delete  SUCCESS after" in out
    assert "ok: the daemon answered Create and Delete SUCCESS" in result.stderr + out
    answered = [(e["request_type"], e["outcome"], e["status"]) for e in requests_of(daemon)]
    assert answered == [("Create", "answered", "SUCCESS"), ("Delete", "answered", "SUCCESS")]
    # the answers were read, then removed from the operator's bucket
    assert emulator.client("s3").list_objects_v2(Bucket=provider.bucket).get("KeyCount") == 0


def test_a_ping_is_answered_no_handler_and_runs_no_handler(spawn, provider: Provider, calls_file: Path) -> None:
    daemon = spawn("d")
    result = invoke("--topic-arn", provider.topic_arn, "--response-bucket", f"{provider.bucket}/smoke")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Create  FAILED" in result.stdout and "Reason: no handler for Custom::CfnProviderPing" in result.stdout
    assert "Delete  SUCCESS" in result.stdout  # the failed Create's marker: answered without a handler
    assert "ok: the daemon answered (FAILED 'no handler' is a ping's expected answer" in result.stdout
    assert f"/{provider.bucket}/smoke/" in result.stdout
    assert [e["request_type"] for e in requests_of(daemon)] == ["Create", "Delete"]
    assert recorded_calls(calls_file) == []


def test_a_failed_answer_is_shown_with_its_reason_and_exits_1(spawn, provider: Provider) -> None:
    spawn("d")
    result = invoke(
        "--topic-arn",
        provider.topic_arn,
        "--response-bucket",
        provider.bucket,
        "--resource-type",
        "Custom::Echo",
        "--property",
        "FailWith=quota reached",
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Create  FAILED" in result.stdout and "quota reached" in result.stdout
    assert "the daemon answered the Create request FAILED" in result.stderr


def test_a_daemon_that_refuses_the_response_url_is_named_as_a_likely_cause(
    emulator: Emulator, provider: Provider, tmp_path: Path
) -> None:
    """The daemon's default allowlist (CloudFormation's buckets only): the request is refused as a
    security event and never answered; invoke says which --allow-response-url would be needed."""
    daemon = SubprocessDaemon(
        [
            sys.executable,
            "-m",
            "cfn_provider",
            "run",
            "--queue-url",
            provider.queue_url,
            "--topic-arn",
            provider.topic_arn,
            "--state",
            f"sqlite://{tmp_path}/state.db",
            "--no-verify-signatures",
            "--handler",
            "Custom::Echo",
            "--wait-seconds",
            "1",
            "--log-format",
            "json",
        ],
        {**os.environ, **emulator.env()},
        tmp_path / "d.log",
    )
    try:
        daemon.start()
        result = invoke("--topic-arn", provider.topic_arn, "--response-bucket", provider.bucket, "--timeout", "5")
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Create  NO ANSWER" in result.stdout
        assert f"--allow-response-url {emulator.endpoint}/{provider.bucket}/cfn-provider-invoke/" in result.stdout
        assert wait_for_event(daemon, event="security", timeout=5)
        assert "Delete" not in result.stdout  # nothing to clean up after a Create nobody answered
    finally:
        daemon.stop()


def test_the_topic_comes_from_the_daemons_config_file(spawn, provider: Provider, tmp_path: Path) -> None:
    spawn("d")
    config = tmp_path / "config.toml"
    config.write_text(
        f'queue-url = "{provider.queue_url}"\ntopic-arn = ["{provider.topic_arn}"]\n'
        'concurrency = 4\n\n[handlers]\n"Custom::Echo" = true\n'
    )
    result = invoke(
        "--config",
        str(config),
        "--response-bucket",
        provider.bucket,
        "--resource-type",
        "Custom::Echo",
        "--properties-json",
        json.dumps({"Tags": ["a", "b"]}),
        "--keep",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"through the topic {provider.topic_arn}" in result.stdout
    assert 'Data: {"Tags": ["a", "b"]}' in result.stdout and "Delete" not in result.stdout  # --keep
    config.write_text(f'topic-arn = ["{provider.topic_arn}", "{provider.topic_arn}-2"]\n')
    two = invoke("--config", str(config), "--response-bucket", provider.bucket)
    assert two.returncode == 2 and "the daemon accepts 2 topics: name one with --topic-arn" in two.stderr
    bad = invoke("--topic-arn", provider.topic_arn, "--response-bucket", provider.bucket, "--property", "NoEquals")
    assert bad.returncode == 2 and "--property 'NoEquals': expected KEY=VALUE" in bad.stderr


# ---- through CloudFormation --------------------------------------------------------------------


def test_through_cloudformation_a_stack_is_created_and_deleted(
    spawn, provider: Provider, cloudformation: CloudFormationApi
) -> None:
    daemon = spawn("d")
    result = invoke(
        "--topic-arn",
        provider.topic_arn,
        "--resource-type",
        "Custom::Echo",
        "--property",
        "Colour=blue",
        "--stack-name",
        "smoke-1",
        env={"AWS_ENDPOINT_URL_CLOUDFORMATION": cloudformation.endpoint},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "through CloudFormation" in out and "stack smoke-1: creating" in out
    assert "Create  SUCCESS after" in out and "Delete  SUCCESS after" in out
    assert "stack smoke-1: DELETE_COMPLETE" in out
    [stack] = cloudformation.stacks.values()
    assert stack.status == "DELETE_COMPLETE"
    create, delete = cloudformation.requests
    assert create["ResourceProperties"] == {
        "ServiceToken": provider.topic_arn,
        "ServiceTimeout": "60",
        "Colour": "blue",
    }
    assert delete["RequestType"] == "Delete"
    assert [(e["request_type"], e["status"]) for e in requests_of(daemon)] == [
        ("Create", "SUCCESS"),
        ("Delete", "SUCCESS"),
    ]


def test_through_cloudformation_a_ping_rolls_back_and_exits_0(
    spawn, provider: Provider, cloudformation: CloudFormationApi
) -> None:
    spawn("d")
    result = invoke("--topic-arn", provider.topic_arn, env={"AWS_ENDPOINT_URL_CLOUDFORMATION": cloudformation.endpoint})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Create  FAILED" in result.stdout and "Reason: no handler for Custom::CfnProviderPing" in result.stdout
    assert "ROLLBACK_COMPLETE" in result.stdout and "DELETE_COMPLETE" in result.stdout
    assert "Delete  SUCCESS" in result.stdout


def test_through_cloudformation_no_daemon_fails_within_the_timeout_and_says_how_to_clean_up(
    provider: Provider, cloudformation: CloudFormationApi
) -> None:
    result = invoke(
        "--topic-arn",
        provider.topic_arn,
        "--resource-type",
        "Custom::Echo",
        "--timeout",
        "5",
        "--stack-name",
        "smoke-dead",
        env={"AWS_ENDPOINT_URL_CLOUDFORMATION": cloudformation.endpoint},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Create  NO ANSWER" in result.stdout and "CloudFormation did not receive a response" in result.stdout
    assert "is the daemon receiving (`cfn-provider check`)?" in result.stdout
    assert "stack smoke-dead is left DELETE_FAILED" in result.stdout
    assert "aws cloudformation delete-stack --stack-name smoke-dead --retain-resources SmokeTest" in result.stdout
    assert "NO ANSWER to the Create request" in result.stderr


# ---- docs/operating.md: "Run it against an emulator" ------------------------------------------


def emulator_recipe() -> str:
    """The sh block of that section, as written."""
    text = (REPO / "docs" / "operating.md").read_text()
    section = text.split("### Run it against an emulator", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_emulator_recipe_in_operating_md_runs_as_written(emulator: Emulator, tmp_path: Path) -> None:
    """Every line of the recipe, in bash, but the two that install moto and start its server (the
    test's own emulator stands in, at its own port)."""
    recipe = emulator_recipe()
    lines = recipe.splitlines()
    assert lines[0].startswith("pip install ") and lines[1].startswith("moto_server ")
    script = "\n".join(lines[2:]).replace("http://127.0.0.1:5000", emulator.endpoint)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CFN_PROVIDER_", "STATE_DIRECTORY"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}", HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state")
    )
    result = subprocess.run(
        [
            "bash",
            "-e",
            "-c",
            f"trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}\nwait $DAEMON  # the graceful stop exits 0\n",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "Create  SUCCESS" in out and 'Data: {"Colour": "blue"}' in out and "Delete  SUCCESS" in out
    assert "ok: the daemon answered Create and Delete SUCCESS" in out
    assert "ok (pid " in out and "daemon: sqs " in out and "/local (health file " in out
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"')]
    assert [e["request_type"] for e in events if e.get("event") == "request"] == ["Create", "Delete"]
    assert any(e.get("event") == "stopped" for e in events)


def test_no_answer_names_the_cause_the_daemon_recorded_and_invoke_waits_only_its_timeout(
    emulator: Emulator, provider: Provider, tmp_path: Path
) -> None:
    """A daemon that accepts another topic refuses invoke's message as a security event; invoke
    reads why from the daemon's health file (found from its --config, as check finds it) and
    gives up after --timeout, not ten seconds later."""
    other = emulator.client("sns").create_topic(Name=f"other-{tmp_path.name[-8:]}")["TopicArn"]
    config = tmp_path / "daemon.toml"
    config.write_text(
        f'queue-url = "{provider.queue_url}"\nstate = "sqlite://{tmp_path}/state.db"\ntopic-arn = ["{other}"]\n'
    )
    daemon = SubprocessDaemon(
        [
            sys.executable,
            "-m",
            "cfn_provider",
            "run",
            "--config",
            str(config),
            "--no-verify-signatures",
            "--allow-response-url",
            f"{emulator.endpoint}/",
            "--handler",
            "Custom::Echo",
            "--wait-seconds",
            "1",
            "--log-format",
            "json",
        ],
        {**os.environ, **emulator.env()},
        tmp_path / "d.log",
    )
    try:
        daemon.start()
        result = invoke(
            "--config",
            str(config),
            "--topic-arn",
            provider.topic_arn,
            "--response-bucket",
            provider.bucket,
            "--timeout",
            "5",
        )
        assert result.returncode == 2, result.stdout + result.stderr
        head = next(line for line in result.stdout.splitlines() if "NO ANSWER" in line)
        assert float(head.split("after ")[1].split(" s")[0]) < 10  # --timeout 5 (it waited 15 s before)
        assert "no answer within 5 s; the daemon's health file" in result.stdout
        assert "security: TopicArn" in result.stdout and "-> it accepts other topics" in result.stdout
    finally:
        daemon.stop()


def test_a_signature_the_daemon_could_not_verify_points_at_the_emulator_flags() -> None:
    from cfn_provider.ops.invoke import likely_cause

    said, fix = likely_cause(
        {"at": 0, "event": "security", "reason": "SNS signature rejected: signature does not match"}, "http://x/"
    )
    assert "SNS signature rejected" in said and "--no-verify-signatures" in fix
    deferred = likely_cause({"at": 0, "event": "deferred", "reason": "signing certificate unavailable"}, "p")
    assert "--no-verify-signatures" in deferred[1]
    url = likely_cause({"at": 0, "event": "security", "reason": "ResponseURL 'http://x' rejected"}, "http://x/b/")
    assert url[1].endswith("--allow-response-url http://x/b/")
