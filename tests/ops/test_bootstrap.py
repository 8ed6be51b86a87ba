"""`cfn-provider bootstrap` against moto's server: create or adopt, idempotently.

Each test uses its own names, so tests share the session's emulator without seeing each other.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest
from click.testing import CliRunner, Result

import cfn_provider.cli as cli
import cfn_provider.logs
from cfn_provider.config import Settings
from cfn_provider.local.emulator import REGION, Emulator
from cfn_provider.pipeline.budget import MAX_RECEIVE_COUNT, max_receive_count

KINDS = (
    "sns topic policy",
    "sns topic",
    "sqs dead-letter policy",
    "sqs dead-letter",
    "sqs queue policy",
    "sqs queue",
    "sns subscription",
    "dynamodb table",
    "config file",
)
ACTIONS = ("would create", "would update", "created", "updated", "exists")


@pytest.fixture(autouse=True)
def no_provider_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("CFN_PROVIDER_"):
            monkeypatch.delenv(name)


@pytest.fixture
def name() -> str:
    return f"bs-{uuid.uuid4().hex[:10]}"


def bootstrap(*args: str) -> Result:
    result = CliRunner().invoke(cli.main, ["bootstrap", "--region", REGION, *args], prog_name="cfn-provider")
    return result


def actions(output: str) -> dict[str, str]:
    """{"sqs queue": "created", ...} from the command's per-resource lines."""
    found = {}
    for line in output.splitlines():
        action = next((a for a in ACTIONS if line.startswith(a + " ")), None)
        if action is None:
            continue
        rest = line[len(action) :].strip()
        kind = next(k for k in KINDS if rest.startswith(k + " "))
        found[kind] = action
    return found


def queue_attributes(emulator: Emulator, queue_name: str) -> dict[str, str]:
    sqs = emulator.client("sqs")
    url = sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


def subscriptions(emulator: Emulator, topic_arn: str) -> list[dict[str, Any]]:
    return emulator.client("sns").list_subscriptions_by_topic(TopicArn=topic_arn)["Subscriptions"]


def snapshot(emulator: Emulator, name: str, topic_arn: str, table: str | None = None) -> dict[str, Any]:
    """Everything bootstrap manages, minus timestamps and counters."""
    volatile = ("Timestamp", "ApproximateNumber")
    state: dict[str, Any] = {
        "topics": sorted(t["TopicArn"] for t in emulator.client("sns").list_topics()["Topics"]),
        "queue": {
            k: v
            for k, v in queue_attributes(emulator, name).items()
            if not k.startswith(volatile) and not k.endswith("Timestamp")
        },
        "dlq": {
            k: v
            for k, v in queue_attributes(emulator, f"{name}-dlq").items()
            if not k.startswith(volatile) and not k.endswith("Timestamp")
        },
        "subscriptions": [(s["SubscriptionArn"], s["Endpoint"]) for s in subscriptions(emulator, topic_arn)],
    }
    if table:
        ddb = emulator.client("dynamodb")
        desc = ddb.describe_table(TableName=table)["Table"]
        state["table"] = (
            desc["KeySchema"],
            desc["TableArn"],
            ddb.describe_time_to_live(TableName=table)["TimeToLiveDescription"],
        )
    return state


def topic_arn_of(name: str) -> str:
    return f"arn:aws:sns:{REGION}:123456789012:{name}"


# ---------------------------------------------------------------------------------- first run
def test_first_run_creates_everything(emulator, name):
    table = f"{name}-state"
    result = bootstrap("--name", name, "--dynamodb-table", table)
    assert result.exit_code == 0, result.output
    assert actions(result.output) == {kind: "created" for kind in KINDS if kind != "config file"}
    topic = topic_arn_of(name)

    queue = queue_attributes(emulator, name)
    dlq = queue_attributes(emulator, f"{name}-dlq")
    assert queue["VisibilityTimeout"] == "60"
    assert queue["MessageRetentionPeriod"] == dlq["MessageRetentionPeriod"] == str(14 * 24 * 3600)
    redrive = json.loads(queue["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == dlq["QueueArn"] and int(redrive["maxReceiveCount"]) == MAX_RECEIVE_COUNT

    assert queue["SqsManagedSseEnabled"] == dlq["SqsManagedSseEnabled"] == "true"
    policy = json.loads(queue["Policy"])
    statement, tls = policy["Statement"]
    assert tls == {
        "Sid": "TlsOnly",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "sqs:*",
        "Resource": queue["QueueArn"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }
    assert [s["Sid"] for s in json.loads(dlq["Policy"])["Statement"]] == ["TlsOnly"]
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"Service": "sns.amazonaws.com"}
    assert statement["Action"] == "sqs:SendMessage"
    assert statement["Resource"] == queue["QueueArn"]
    assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": topic}}

    [sub] = subscriptions(emulator, topic)
    assert sub["Protocol"] == "sqs" and sub["Endpoint"] == queue["QueueArn"]
    sub_attrs = emulator.client("sns").get_subscription_attributes(SubscriptionArn=sub["SubscriptionArn"])
    assert sub_attrs["Attributes"]["RawMessageDelivery"] == "false"

    ddb = emulator.client("dynamodb")
    desc = ddb.describe_table(TableName=table)["Table"]
    assert desc["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert desc["AttributeDefinitions"][0] == {"AttributeName": "pk", "AttributeType": "S"}
    [index] = desc["GlobalSecondaryIndexes"]  # the sparse index of waiting polls (no Scan anywhere)
    assert index["IndexName"] == "polls" and [k["AttributeName"] for k in index["KeySchema"]] == [
        "poll_shard",
        "next_poll",
    ]
    assert desc["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ttl = ddb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"}

    # what to do next
    assert f"ServiceToken (put this in your templates):\n  {topic}\n" in result.output
    run_line = next(line for line in result.output.splitlines() if "cfn-provider run" in line)
    assert f"--queue-url {queue_url(emulator, name)}" in run_line and f"--topic-arn {topic}" in run_line
    assert f"--region {REGION}" in run_line and f"--state dynamodb://{table}" in run_line


def queue_url(emulator: Emulator, name: str) -> str:
    return emulator.client("sqs").get_queue_url(QueueName=name)["QueueUrl"]


def test_the_subscription_delivers_signed_envelopes_to_the_queue(emulator, name):
    assert bootstrap("--name", name).exit_code == 0
    emulator.client("sns").publish(TopicArn=topic_arn_of(name), Message='{"hello": "queue"}')
    sqs = emulator.client("sqs")
    messages = sqs.receive_message(QueueUrl=queue_url(emulator, name), WaitTimeSeconds=5)["Messages"]
    envelope = json.loads(messages[0]["Body"])
    assert envelope["Type"] == "Notification" and envelope["TopicArn"] == topic_arn_of(name)
    assert envelope["Message"] == '{"hello": "queue"}' and "Signature" in envelope


# ---------------------------------------------------------------------------------- idempotency
def test_second_run_changes_nothing(emulator, name, tmp_path):
    table = f"{name}-state"
    config = tmp_path / "provider.toml"
    first = bootstrap("--name", name, "--dynamodb-table", table, "--write-config", str(config))
    assert first.exit_code == 0, first.output
    before = snapshot(emulator, name, topic_arn_of(name), table)
    written = config.read_text()

    second = bootstrap("--name", name, "--dynamodb-table", table, "--write-config", str(config))
    assert second.exit_code == 0, second.output
    assert actions(second.output) == {kind: "exists" for kind in KINDS}
    assert "No changes" in second.output
    assert snapshot(emulator, name, topic_arn_of(name), table) == before
    assert config.read_text() == written


def test_drift_is_put_back_and_then_left_alone(emulator, name):
    assert bootstrap("--name", name).exit_code == 0
    sqs, sns = emulator.client("sqs"), emulator.client("sns")
    url = queue_url(emulator, name)
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "VisibilityTimeout": "30",
            "Policy": json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sqs:SendMessage", "Resource": "*"}],
                }
            ),
        },
    )
    [sub] = subscriptions(emulator, topic_arn_of(name))
    sns.set_subscription_attributes(
        SubscriptionArn=sub["SubscriptionArn"], AttributeName="RawMessageDelivery", AttributeValue="true"
    )

    planned = bootstrap("--name", name, "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert actions(planned.output) == {
        "sns topic": "exists",
        "sqs dead-letter": "exists",
        "sqs queue": "would update",
        "sqs queue policy": "would update",
        "sns subscription": "would update",
        "sns topic policy": "exists",
        "sqs dead-letter policy": "exists",
    }
    assert queue_attributes(emulator, name)["VisibilityTimeout"] == "30"  # the dry run changed nothing

    fixed = bootstrap("--name", name)
    assert fixed.exit_code == 0, fixed.output
    assert actions(fixed.output) == {
        "sns topic": "exists",
        "sqs dead-letter": "exists",
        "sqs queue": "updated",
        "sqs queue policy": "updated",
        "sns subscription": "updated",
        "sns topic policy": "exists",
        "sqs dead-letter policy": "exists",
    }
    queue = queue_attributes(emulator, name)
    assert queue["VisibilityTimeout"] == "60"
    statements = json.loads(queue["Policy"])["Statement"]
    # the drifted statement has no Sid, so it is not ours to remove: merging by Sid keeps it
    assert statements[0] == {"Effect": "Allow", "Principal": "*", "Action": "sqs:SendMessage", "Resource": "*"}
    assert [s.get("Sid") for s in statements[1:]] == ["TopicMayDeliver", "TlsOnly"]
    assert statements[1]["Condition"] == {"ArnEquals": {"aws:SourceArn": topic_arn_of(name)}}
    attrs = sns.get_subscription_attributes(SubscriptionArn=sub["SubscriptionArn"])["Attributes"]
    assert attrs["RawMessageDelivery"] == "false"

    again = bootstrap("--name", name)
    assert set(actions(again.output).values()) == {"exists"}


def test_changed_options_update_the_queue(emulator, name):
    assert bootstrap("--name", name).exit_code == 0
    result = bootstrap(
        "--name", name, "--max-receive-count", "9", "--visibility-timeout", "120", "--retention-days", "7"
    )
    assert result.exit_code == 0, result.output
    assert actions(result.output)["sqs queue"] == "updated"
    assert actions(result.output)["sqs dead-letter"] == "updated"
    queue = queue_attributes(emulator, name)
    assert queue["VisibilityTimeout"] == "120" and queue["MessageRetentionPeriod"] == str(7 * 24 * 3600)
    assert int(json.loads(queue["RedrivePolicy"])["maxReceiveCount"]) == 9
    assert "--visibility-timeout 120" in result.output  # run with the queue's own value


# ---------------------------------------------------------------------------------- dry run
def test_dry_run_creates_nothing(emulator, name, tmp_path):
    table = f"{name}-state"
    config = tmp_path / "provider.toml"
    result = bootstrap("--name", name, "--dynamodb-table", table, "--write-config", str(config), "--dry-run")
    assert result.exit_code == 0, result.output
    assert actions(result.output) == {kind: "would create" for kind in KINDS}
    assert "nothing was changed" in result.output
    assert topic_arn_of(name) in result.output

    assert topic_arn_of(name) not in [t["TopicArn"] for t in emulator.client("sns").list_topics()["Topics"]]
    assert not emulator.client("sqs").list_queues(QueueNamePrefix=name).get("QueueUrls")
    assert table not in emulator.client("dynamodb").list_tables()["TableNames"]
    assert not config.exists()


# ---------------------------------------------------------------------------------- adopting
def test_an_existing_topic_is_adopted(emulator, name):
    topic = emulator.client("sns").create_topic(Name=f"{name}-theirs")["TopicArn"]
    result = bootstrap("--name", name, "--topic-arn", topic)
    assert result.exit_code == 0, result.output
    assert actions(result.output)["sns topic"] == "exists" and "adopted" in result.output
    assert topic_arn_of(name) not in [t["TopicArn"] for t in emulator.client("sns").list_topics()["Topics"]]
    policy = json.loads(queue_attributes(emulator, name)["Policy"])
    assert policy["Statement"][0]["Condition"] == {"ArnEquals": {"aws:SourceArn": topic}}
    assert [s["Endpoint"].rsplit(":", 1)[-1] for s in subscriptions(emulator, topic)] == [name]
    topic_policy = json.loads(emulator.client("sns").get_topic_attributes(TopicArn=topic)["Attributes"]["Policy"])
    assert "DeliverOnlyToTheQueue" in [s.get("Sid") for s in topic_policy["Statement"]]
    assert f"ServiceToken (put this in your templates):\n  {topic}\n" in result.output

    again = bootstrap("--name", name, "--topic-arn", topic)
    assert set(actions(again.output).values()) == {"exists"}


def test_a_missing_topic_to_adopt_is_an_error(emulator, name):
    result = bootstrap("--name", name, "--topic-arn", topic_arn_of(f"{name}-nope"))
    assert result.exit_code == 1
    assert "does not exist" in result.output
    assert not emulator.client("sqs").list_queues(QueueNamePrefix=name).get("QueueUrls")


def test_an_existing_table_without_ttl_gets_it(emulator, name):
    table = f"{name}-state"
    ddb = emulator.client("dynamodb")
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
    )
    result = bootstrap("--name", name, "--dynamodb-table", table)
    assert result.exit_code == 0, result.output
    assert actions(result.output)["dynamodb table"] == "updated"
    assert ddb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]["AttributeName"] == "ttl"
    assert [i["IndexName"] for i in ddb.describe_table(TableName=table)["Table"]["GlobalSecondaryIndexes"]] == ["polls"]


def test_an_existing_table_with_another_key_is_refused(emulator, name):
    table = f"{name}-state"
    emulator.client("dynamodb").create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    result = bootstrap("--name", name, "--dynamodb-table", table)
    assert result.exit_code == 1
    assert "choose another --dynamodb-table" in result.output


# ---------------------------------------------------------------------------------- config file
def test_written_config_is_what_run_reads(emulator, name, tmp_path, monkeypatch):
    table = f"{name}-state"
    config = tmp_path / "etc" / "provider.toml"
    result = bootstrap("--name", name, "--dynamodb-table", table, "--write-config", str(config))
    assert result.exit_code == 0, result.output
    assert actions(result.output)["config file"] == "created"
    assert f"cfn-provider run --config {config}" in result.output

    seen: list[Settings] = []
    monkeypatch.setattr(cli, "_serve", lambda settings: seen.append(settings) or 0)
    monkeypatch.setattr(cfn_provider.logs, "configure", lambda *a, **k: None)
    run = CliRunner().invoke(cli.main, ["run", "--config", str(config)], prog_name="cfn-provider")
    assert run.exit_code == 0, run.output
    [settings] = seen
    assert settings.queue_url == queue_url(emulator, name)
    assert settings.region == REGION
    assert settings.topic_arns == (topic_arn_of(name),)
    assert settings.state == f"dynamodb://{table}"
    assert settings.visibility_timeout == 60


def test_config_without_a_table_keeps_the_default_state(emulator, name, tmp_path, monkeypatch):
    config = tmp_path / "provider.toml"
    assert bootstrap("--name", name, "--write-config", str(config)).exit_code == 0
    seen: list[Settings] = []
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    monkeypatch.setattr(cli, "_serve", lambda settings: seen.append(settings) or 0)
    monkeypatch.setattr(cfn_provider.logs, "configure", lambda *a, **k: None)
    run = CliRunner().invoke(cli.main, ["run", "--config", str(config)], prog_name="cfn-provider")
    assert run.exit_code == 0, run.output
    assert seen[0].state.startswith(f"sqlite://{tmp_path / 'state' / 'state-'}")  # the daemon's own file


def test_bootstrap_help_lists_its_options():
    result = CliRunner().invoke(cli.main, ["bootstrap", "--help"])
    assert result.exit_code == 0
    for option in (
        "--name",
        "--topic-arn",
        "--region",
        "--dynamodb-table",
        "--max-receive-count",
        "--visibility-timeout",
        "--retention-days",
        "--dry-run",
        "--write-config",
    ):
        assert option in result.output


def test_a_bad_table_name_is_refused_before_anything_is_made(emulator, name):
    result = bootstrap("--name", name, "--dynamodb-table", "no/slashes")
    assert result.exit_code == 1 and "dynamodb://TABLE" in result.output
    assert not emulator.client("sqs").list_queues(QueueNamePrefix=name).get("QueueUrls")


def test_the_default_max_receive_count_is_the_receive_budget():
    """1 delivery + 2 stops + 2 kills + 3 lost on the network + 1 failed delete + 1 spare (daemon/pipeline/budget.py);
    waits for another holder, store and certificate outages spend none."""
    assert MAX_RECEIVE_COUNT == max_receive_count() == 10
    assert max_receive_count(stops=5) == 13  # e.g. a fleet rolled one member at a time, more often
    assert cli.bootstrap.params[[p.name for p in cli.bootstrap.params].index("max_receive_count")].default == 10


# ---------------------------------------------------------------------------------- the template's standard
def test_topic_policy_is_the_templates(emulator, name):
    """Only this account publishes, only the provider's queue subscribes, TLS only: the statements
    of deploy/provider.yaml's TopicPolicy; SNS's own default statement stays."""
    assert bootstrap("--name", name).exit_code == 0
    topic = topic_arn_of(name)
    policy = json.loads(emulator.client("sns").get_topic_attributes(TopicArn=topic)["Attributes"]["Policy"])
    by_sid = {s.get("Sid"): s for s in policy["Statement"]}
    queue_arn = queue_attributes(emulator, name)["QueueArn"]
    assert by_sid["ThisAccountMayPublish"]["Principal"] == {"AWS": "arn:aws:iam::123456789012:root"}
    assert by_sid["NoPublishersFromOtherAccounts"]["Condition"] == {
        "StringNotEquals": {"aws:PrincipalAccount": "123456789012"}
    }
    assert by_sid["DeliverOnlyToTheQueue"] == {
        "Sid": "DeliverOnlyToTheQueue",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "sns:Subscribe",
        "Resource": topic,
        "Condition": {"StringNotEquals": {"sns:Endpoint": queue_arn}},
    }
    assert by_sid["TlsOnly"]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    for s in by_sid.values():
        assert s["Effect"] == "Deny" or s["Sid"] in ("ThisAccountMayPublish", "__default_statement_ID"), s


def test_an_adopted_queues_own_statements_are_kept(emulator, name):
    """An organisation's statement on the queue (by Sid) survives bootstrap, which only puts its own in."""
    sqs = emulator.client("sqs")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    theirs = {
        "Sid": "OrgAuditRead",
        "Effect": "Allow",
        "Principal": {"AWS": "arn:aws:iam::123456789012:role/audit"},
        "Action": "sqs:GetQueueAttributes",
        "Resource": arn,
    }
    old = {
        "Sid": "AllowServiceTokenTopicOnly",
        "Effect": "Allow",
        "Principal": {"Service": "sns.amazonaws.com"},
        "Action": "sqs:SendMessage",
        "Resource": arn,
    }  # what bootstrap wrote before: replaced
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"Policy": json.dumps({"Version": "2012-10-17", "Statement": [theirs, old]})}
    )
    result = bootstrap("--name", name)
    assert result.exit_code == 0, result.output
    assert actions(result.output)["sqs queue policy"] == "updated"
    statements = json.loads(queue_attributes(emulator, name)["Policy"])["Statement"]
    assert [s.get("Sid") for s in statements] == ["OrgAuditRead", "TopicMayDeliver", "TlsOnly"]
    assert statements[0] == theirs
    assert queue_attributes(emulator, name)["SqsManagedSseEnabled"] == "true"
    again = bootstrap("--name", name)
    assert actions(again.output)["sqs queue policy"] == "exists"


def _printed_policy(output: str) -> dict[str, Any]:
    marker = "IAM policy for the daemon's role"
    assert marker in output, output
    return json.loads(output.split(marker, 1)[1].split("\n", 1)[1])


def test_the_printed_iam_policy_covers_exactly_the_calls_the_daemon_makes(emulator, name):
    """Ready to attach: exact ARNs of the queue, its DLQ, the table and its index; each action one the
    daemon's code calls (daemon/transports/queue.py, daemon/stores/dynamodb.py), and every such call granted."""
    from tests.deploy.test_templates import REPO, _calls, dynamodb_store_calls, iam

    table = f"{name}-state"
    result = bootstrap("--name", name, "--dynamodb-table", table)
    assert result.exit_code == 0, result.output
    policy = _printed_policy(result.output)
    queue_arn = queue_attributes(emulator, name)["QueueArn"]
    dlq_arn = queue_attributes(emulator, f"{name}-dlq")["QueueArn"]
    table_arn = emulator.client("dynamodb").describe_table(TableName=table)["Table"]["TableArn"]
    grants: dict[str, set[str]] = {}
    for s in policy["Statement"]:
        assert s["Effect"] == "Allow" and "*" not in json.dumps(s), s
        for action in s["Action"]:
            grants.setdefault(action, set()).add(s["Resource"])

    sqs_calls = {iam("sqs:", op) for op in _calls(REPO / "daemon" / "transports" / "queue.py")}
    dynamodb_calls = {iam("dynamodb:", op) for op in dynamodb_store_calls()}
    assert {a for a in grants if a.startswith("sqs:")} == sqs_calls
    assert {a for a in grants if a.startswith("dynamodb:")} == dynamodb_calls
    assert set(grants) == sqs_calls | dynamodb_calls
    for action in sqs_calls:
        assert grants[action] == ({queue_arn} if action == "sqs:GetQueueAttributes" else {queue_arn, dlq_arn}), action
    assert grants["dynamodb:Query"] == {f"{table_arn}/index/polls"}
    for action in dynamodb_calls - {"dynamodb:Query"}:
        assert grants[action] == {table_arn}, action

    without_table = _printed_policy(bootstrap("--name", f"{name}-solo").output)
    assert not [a for s in without_table["Statement"] for a in s["Action"] if a.startswith("dynamodb:")]


def test_on_an_emulator_the_printed_run_line_is_complete(emulator, name, tmp_path, monkeypatch):
    # bootstrap ran with AWS_ENDPOINT_URL (the emulator fixture's): the daemon needs it too, and the
    # emulator's flags (signatures its certificate URL cannot prove, its S3 URLs allowed)
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    config = tmp_path / "local.toml"
    result = bootstrap("--name", name, "--write-config", str(config))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    run_line = lines[lines.index(next(x for x in lines if x.startswith("Run the daemon"))) + 1].strip()
    assert f"on the emulator at {emulator.endpoint}" in result.output
    assert run_line == (
        f"AWS_ENDPOINT_URL={emulator.endpoint} cfn-provider run --config {config} --no-verify-signatures "
        f"--allow-response-url {emulator.endpoint}/ \\"
    )


def test_on_aws_the_run_line_has_no_emulator_flags(monkeypatch):
    from cfn_provider.ops.bootstrap import emulator_endpoints

    assert emulator_endpoints({}) is None
    assert emulator_endpoints({"AWS_ENDPOINT_URL": "https://sqs.eu-west-1.amazonaws.com"}) is None
    assert emulator_endpoints({"AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}) == (
        "http://127.0.0.1:5000",
        "http://127.0.0.1:5000",
    )
