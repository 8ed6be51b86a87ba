"""`cfn-provider redrive` moves dead letters back, lists them redacted, and can just look."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cfn_provider.cli import main
from cfn_provider.local.emulator import Emulator, Provider, Stack
from tests.support.aws import queue_counts


def dead_letters(emulator: Emulator) -> tuple[Provider, dict]:
    provider = Provider.create(emulator, dlq=True)
    req = Stack(provider).request("Create", "Stuck", resource_type="Custom::Test")
    sqs = emulator.client("sqs")
    sqs.send_message(QueueUrl=provider.dlq_url, MessageBody=json.dumps(req))
    sqs.send_message(QueueUrl=provider.dlq_url, MessageBody="garbage https://x.example/k?Signature=SECRET1")
    return provider, req


def test_redrive_moves_everything_back_and_lists_it_redacted(emulator: Emulator) -> None:
    provider, req = dead_letters(emulator)
    result = CliRunner().invoke(main, ["redrive", "--queue-url", provider.queue_url])
    assert result.exit_code == 0, result.output
    assert f"Create Custom::Test Stuck RequestId={req['RequestId']}" in result.output
    assert "SECRET1" not in result.output and "?<redacted>" in result.output
    assert "2 message(s) moved" in result.output
    sqs = emulator.client("sqs")
    assert queue_counts(sqs, provider.dlq_url) == (0, 0)
    bodies = sorted(
        m["Body"] for m in sqs.receive_message(QueueUrl=provider.queue_url, MaxNumberOfMessages=10)["Messages"]
    )
    assert json.dumps(req) in bodies


def test_dry_run_moves_nothing(emulator: Emulator) -> None:
    provider, _ = dead_letters(emulator)
    result = CliRunner().invoke(main, ["redrive", "--queue-url", provider.queue_url, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "2 message(s) would move" in result.output
    sqs = emulator.client("sqs")
    assert queue_counts(sqs, provider.dlq_url) == (2, 0)  # visible again at once
    assert queue_counts(sqs, provider.queue_url) == (0, 0)


def test_max_limits_the_move(emulator: Emulator) -> None:
    provider, _ = dead_letters(emulator)
    result = CliRunner().invoke(main, ["redrive", "--queue-url", provider.queue_url, "--max", "1"])
    assert result.exit_code == 0 and "1 message(s) moved" in result.output
    assert queue_counts(emulator.client("sqs"), provider.queue_url)[0] == 1


def test_queue_without_dlq_is_a_clear_error(emulator: Emulator, provider: Provider) -> None:
    result = CliRunner().invoke(main, ["redrive", "--queue-url", provider.queue_url])
    assert result.exit_code == 1 and "no RedrivePolicy" in result.output


def test_redrive_reads_the_daemons_own_config_file(emulator: Emulator, tmp_path) -> None:
    """`--config` as run takes it: the queue (and region) come from the daemon's file; settings
    redrive has no use for (handlers, concurrency, topics) are skipped, not refused."""
    provider, req = dead_letters(emulator)
    config = tmp_path / "config.toml"
    config.write_text(
        f'queue-url = "{provider.queue_url}"\nregion = "us-east-1"\ntopic-arn = ["{provider.topic_arn}"]\n'
        'concurrency = 4\n\n[handlers]\n"Custom::Echo" = true\n'
    )
    result = CliRunner().invoke(main, ["redrive", "--config", str(config), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"Create Custom::Test Stuck RequestId={req['RequestId']}" in result.output
    assert f"2 message(s) would move from {provider.dlq_url} to {provider.queue_url}" in result.output
    result = CliRunner().invoke(main, ["redrive"], env={"CFN_PROVIDER_CONFIG": str(config)})
    assert result.exit_code == 0 and "2 message(s) moved" in result.output, result.output
    assert queue_counts(emulator.client("sqs"), provider.dlq_url) == (0, 0)
