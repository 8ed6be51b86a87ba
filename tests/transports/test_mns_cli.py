"""`cfn-provider run --transport mns ...`: its options, and a real daemon process serving ROS end to end.

Skipped until daemon/cli.py's `run` has the options of cfn_provider.ros_options."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import cfn_provider.cli as cli
from tests.dialects.conftest import QUEUE, ros_request
from tests.support.cli import assert_not_started
from tests.support.daemons import REPO, SubprocessDaemon, stop_gracefully, wait_until
from tests.support.mns_server import MnsClient, MnsServer
from tests.support.stub_s3 import StubS3

pytestmark = pytest.mark.skipif(
    not any(p.name == "transport" for p in cli.run.params),
    reason="daemon/cli.py's run has no --transport yet (apply the ros_options diff)",
)


def test_options_reach_settings(captured):
    result = CliRunner().invoke(
        cli.main,
        [
            "run",
            "--transport",
            "mns",
            "--mns-endpoint",
            "https://1.mns.cn-hangzhou.aliyuncs.com",
            "--mns-queue",
            "q",
            "--ros-response-url",
            "intranet",
        ],
    )
    assert result.exit_code == 0, result.output
    [s] = captured
    assert (s.transport, s.mns_endpoint, s.mns_queue, s.ros_response_url, s.queue_url) == (
        "mns",
        "https://1.mns.cn-hangzhou.aliyuncs.com",
        "q",
        "intranet",
        "",
    )


def test_environment_and_defaults(captured, monkeypatch):
    monkeypatch.setenv("CFN_PROVIDER_TRANSPORT", "mns")
    monkeypatch.setenv("CFN_PROVIDER_MNS_ENDPOINT", "https://1.mns.cn-hangzhou.aliyuncs.com")
    monkeypatch.setenv("CFN_PROVIDER_MNS_QUEUE", "q")
    assert CliRunner().invoke(cli.main, ["run"]).exit_code == 0
    assert captured[0].ros_response_url == "auto"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--transport", "mns", "--mns-queue", "q"], "--transport mns needs --mns-endpoint"),
        (["--transport", "mns", "--mns-endpoint", "https://x"], "--transport mns needs --mns-queue"),
        ([], "Missing option '--queue-url'"),
        (["--ros-response-url", "vpc", "--queue-url", "https://sqs"], "Invalid value for '--ros-response-url'"),
    ],
)
def test_usage_errors(captured, args, message):
    result = CliRunner().invoke(cli.main, ["run", *args])
    assert result.exit_code == 2 and message in result.output and not captured


@pytest.mark.parametrize("env", [{}, {"CFN_PROVIDER_MNS_ALLOW_HTTP": "1"}])
def test_plain_http_endpoint_is_refused_at_start_naming_the_option(captured, monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = ["run", "--transport", "mns", "--mns-endpoint", "http://1.mns.cn-hangzhou.aliyuncs.com", "--mns-queue", "q"]
    result = CliRunner().invoke(cli.main, args)
    if env:
        assert result.exit_code == 0 and captured[0].mns_allow_http is True
        return
    assert result.exit_code == 2 and not captured
    assert "plain http" in result.output and "--mns-allow-http" in result.output
    result = CliRunner().invoke(cli.main, [*args, "--mns-allow-http"])
    assert result.exit_code == 0 and captured[0].mns_allow_http is True


def test_https_endpoint_needs_no_opt_in(captured):
    result = CliRunner().invoke(
        cli.main,
        ["run", "--transport", "mns", "--mns-endpoint", "https://1.mns.cn-hangzhou.aliyuncs.com", "--mns-queue", "q"],
    )
    assert result.exit_code == 0 and captured[0].mns_allow_http is False


def test_missing_credentials_exit_2(monkeypatch, tmp_path):
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("cfn_provider.logs.configure", lambda *a, **k: None)
    result = CliRunner().invoke(
        cli.main,
        [
            "run",
            "--transport",
            "mns",
            "--mns-endpoint",
            "http://127.0.0.1:9",
            "--mns-allow-http",
            "--mns-queue",
            "q",
            "--state",
            f"sqlite://{tmp_path}/s.db",
        ],
    )
    assert_not_started(result, "no Alibaba Cloud credentials")


@pytest.mark.slow
def test_run_serves_ros_over_mns(tmp_path: Path, stub_s3: StubS3):
    with MnsServer() as mns:
        mns.create_queue(QUEUE)
        env = {**os.environ, **mns.env(), "PYTHONPATH": str(REPO)}
        args = [
            sys.executable,
            "-m",
            "cfn_provider",
            "run",
            "--transport",
            "mns",
            "--mns-endpoint",
            mns.endpoint,
            "--mns-allow-http",
            "--mns-queue",
            QUEUE,
            "--handler",
            "Custom::Test=tests.support.handlers",
            "--allow-response-url",
            stub_s3.base_url,
            "--state",
            f"sqlite://{tmp_path}/state.db",
            "--wait-seconds",
            "1",
            "--max-backoff",
            "1",
            "--log-format",
            "json",
            "--log-level",
            "debug",
        ]
        daemon = SubprocessDaemon(args, env, tmp_path / "daemon.log").start()
        try:
            client, pid = MnsClient(mns), None
            stack_id = "b0c1d2e3-0000-4000-8000-000000000001"
            for kind in ("Create", "Update", "Delete"):
                req = ros_request(
                    kind, stub_s3.url(f"cli/{kind}"), stack_id=stack_id, physical_id=pid, props={"Size": kind}
                )
                client.send_message(QUEUE, json.dumps(req), base64_encode=kind == "Update")
                wait_until(
                    lambda k=kind: [r for r in stub_s3.requests_for(f"cli/{k}", "POST") if r.ok],
                    30,
                    f"the {kind} answer",
                )
                [posted] = stub_s3.requests_for(f"cli/{kind}", "POST")
                doc = json.loads(posted.body)
                assert doc["Status"] == "SUCCESS" and posted.header("Content-Type") == ["application/json"]
                pid = pid or doc["PhysicalResourceId"]
                assert doc["PhysicalResourceId"] == pid
            wait_until(lambda: not mns.queue(QUEUE).live, 10, "every message deleted")
            assert stop_gracefully(daemon) == 0
        finally:
            daemon.stop()
        log = daemon.log_path.read_text()
        requests = [e for e in daemon.events() if e.get("event") == "request"]
        assert [(e["request_type"], e["dialect"], e["outcome"]) for e in requests] == [
            ("Create", "ros", "answered"),
            ("Update", "ros", "answered"),
            ("Delete", "ros", "answered"),
        ]
        assert mns.secret not in log


# ---------------------------------------------------------------------------------- options of another transport
MNS = ["--transport", "mns", "--mns-endpoint", "https://1234567890.mns.cn-hangzhou.aliyuncs.com", "--mns-queue", "q"]
SQS = ["--queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/q"]


@pytest.mark.parametrize(
    "base, extra, option",
    [
        (MNS, ["--topic-arn", "arn:aws:sns:eu-west-1:123456789012:t"], "--topic-arn"),
        (MNS, ["--queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/q"], "--queue-url"),
        (MNS, ["--no-verify-signatures"], "--verify-signatures/--no-verify-signatures"),
        (MNS, ["--verify-signatures"], "--verify-signatures/--no-verify-signatures"),
        (MNS, ["--trust-signing-cert-url", "http://127.0.0.1:9/"], "--trust-signing-cert-url"),
        (SQS, ["--mns-endpoint", "https://1.mns.cn-hangzhou.aliyuncs.com"], "--mns-endpoint"),
        (SQS, ["--mns-queue", "q"], "--mns-queue"),
        (SQS, ["--mns-allow-http"], "--mns-allow-http"),
        (SQS, ["--mns-topic", "acs:mns:cn-hangzhou:1:topics/t"], "--mns-topic"),
        (SQS, ["--mns-allow-bare-messages"], "--mns-allow-bare-messages"),
        (SQS, ["--ros-response-url", "public"], "--ros-response-url"),
    ],
)
def test_an_option_of_another_transport_is_refused(captured, base, extra, option):
    """Issue 21 item 9: not silently ignored (an operator who sets --topic-arn on MNS believes topics
    are checked)."""
    result = CliRunner().invoke(cli.main, ["run", *base, *extra])
    assert result.exit_code == 2 and not captured, result.output
    transport = "mns" if base is MNS else "sqs"
    assert f"{option} applies to --transport" in result.output and f"not {transport}" in result.output
    assert "on the command line" in result.output


def test_given_by_the_environment_or_the_config_file_it_is_refused_saying_where(captured, monkeypatch, tmp_path):
    monkeypatch.setenv("CFN_PROVIDER_TOPIC_ARN", "arn:aws:sns:eu-west-1:123456789012:t")
    result = CliRunner().invoke(cli.main, ["run", *MNS])
    assert result.exit_code == 2 and "by CFN_PROVIDER_TOPIC_ARN" in result.output and not captured
    monkeypatch.delenv("CFN_PROVIDER_TOPIC_ARN")
    config = tmp_path / "c.toml"
    config.write_text('mns-topic = "acs:mns:cn-hangzhou:1:topics/t"\n')
    result = CliRunner().invoke(cli.main, ["run", "--config", str(config), *SQS])
    assert result.exit_code == 2 and "--mns-topic applies to --transport mns only" in result.output
    assert "in the --config file" in result.output and not captured


def test_every_option_of_the_table_exists_and_names_known_transports():
    """The one table (option -> transports) that a new transport adds rows to."""
    from cfn_provider.ros_options import APPLIES_TO, TRANSPORTS

    names = {p.name for p in cli.run.params}
    assert set(APPLIES_TO) <= names
    assert all(set(t) <= set(TRANSPORTS) and t for t in APPLIES_TO.values())


def test_mns_topics_reach_settings(captured):
    topic = "acs:mns:cn-hangzhou:1234567890:topics/ros-topic"
    result = CliRunner().invoke(cli.main, ["run", *MNS, "--mns-topic", topic, "--mns-allow-bare-messages"])
    assert result.exit_code == 0, result.output
    assert captured[0].mns_topics == (topic,) and captured[0].mns_allow_bare_messages is True


@pytest.mark.parametrize(
    "topic, message",
    [
        ("acs:mns:cn-hangzhou:1234567890:queues/q", "is not a topic like acs:mns:REGION:ACCOUNT:topics/NAME"),
        ("arn:aws:sns:eu-west-1:1:t", "is not a topic like"),
        ("acs:mns:cn-beijing:1234567890:topics/t", "not of the queue's account 1234567890 and region cn-hangzhou"),
        ("acs:mns:cn-hangzhou:999:topics/t", "not of the queue's account"),
    ],
)
def test_a_bad_or_foreign_mns_topic_is_refused_at_start(captured, topic, message):
    result = CliRunner().invoke(cli.main, ["run", *MNS, "--mns-topic", topic])
    assert result.exit_code == 2 and message in result.output and not captured


# ---------------------------------------------------------------------------------- docs/ros.md's examples
def _ros_md_blocks(fence: str) -> list[str]:
    text = (REPO / "docs" / "ros.md").read_text()
    return [block.split("```", 1)[0] for block in text.split(f"```{fence}\n")[1:]]


def _run_args(block: str) -> list[str]:
    import shlex

    command = block[block.index("cfn-provider run") :].replace("\\\n", " ")
    return shlex.split(command.splitlines()[0])[1:]  # without "cfn-provider"


@pytest.mark.parametrize("block", [b for b in _ros_md_blocks("sh") if "cfn-provider run --transport mns" in b])
def test_the_run_examples_of_docs_ros_md_are_accepted(captured, block):
    result = CliRunner().invoke(cli.main, _run_args(block))
    assert result.exit_code == 0, result.output
    [s] = captured
    assert s.transport == "mns" and s.mns_queue == "cfn-provider"
    assert ("--mns-topic" in block) == bool(s.mns_topics)


def test_the_refusal_shown_in_docs_ros_md_is_the_one_given(captured, monkeypatch):
    [shown] = [b for b in _ros_md_blocks("") if b.startswith("Error: --topic-arn")]
    monkeypatch.setenv("CFN_PROVIDER_TOPIC_ARN", "arn:aws:sns:cn-hangzhou:1234567890123456:cfn-provider")
    [example] = [b for b in _ros_md_blocks("sh") if "--mns-topic" in b]
    result = CliRunner().invoke(cli.main, _run_args(example))
    assert result.exit_code == 2 and shown.strip() in result.output
