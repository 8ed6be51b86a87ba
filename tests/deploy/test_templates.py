"""deploy/: the CloudFormation templates lint clean (cfn-lint, offline) and keep their promises.

provider.yaml stands the provider up (topic, queue + DLQ, table, role, launch template, Auto
Scaling group, alarms); example-consumer.yaml uses its ServiceToken with Custom::Echo. Besides
cfn-lint, these tests pin what the templates promise about security (least-privilege role,
queue policy bound to the topic, enveloped delivery, IMDSv2) and that the unit the user data
writes is systemd/cfn-provider.service.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.pipeline.budget import MAX_RECEIVE_COUNT

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROVIDER = DEPLOY / "provider.yaml"
CONSUMER = DEPLOY / "example-consumer.yaml"
UNIT = REPO / "systemd" / "cfn-provider.service"
TEMPLATES = sorted(p for pattern in ("*.yaml", "*.yml", "*.json", "*.template") for p in DEPLOY.glob(pattern))

SQS_ACTIONS = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}
DYNAMODB_ACTIONS = {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query"}
PSEUDO = {"AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue", "AWS::Partition", "AWS::Region",
          "AWS::StackId", "AWS::StackName", "AWS::URLSuffix"}


# ---------------------------------------------------------------------------------------- helpers
def load(path: Path) -> dict[str, Any]:
    """The template as plain data, short forms (!Ref, !Sub, !GetAtt ...) in their long form."""
    from cfnlint.decode import decode

    template, matches = decode(str(path))
    assert not matches, [str(m) for m in matches]
    assert template is not None
    return json.loads(json.dumps(template))  # cfn-lint's node classes -> dict/list/str


def resources(template: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == rtype}


def only(template: dict[str, Any], rtype: str) -> tuple[str, dict[str, Any]]:
    found = resources(template, rtype)
    assert len(found) == 1, f"expected one {rtype}, found {sorted(found)}"
    return next(iter(found.items()))


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    return as_list(document["Statement"])


def user_data(template: dict[str, Any]) -> str:
    _, lt = only(template, "AWS::EC2::LaunchTemplate")
    encoded = lt["Properties"]["LaunchTemplateData"]["UserData"]
    sub = encoded["Fn::Base64"]["Fn::Sub"]
    assert isinstance(sub, str), "UserData: Fn::Base64 of Fn::Sub on one string, names taken from the template"
    return sub


def render(sub: str, values: dict[str, str]) -> str:
    """Fn::Sub: ${!Literal} -> ${Literal}; ${Name} / ${Name.Attr} -> values[...] (KeyError if unknown)."""
    return re.sub(r"\$\{(!?)([^}]*)\}", lambda m: "${" + m[2] + "}" if m[1] else values[m[2]], sub)


def heredocs(script: str) -> dict[str, str]:
    """`cat > TARGET <<'WORD'` ... `WORD` -> {TARGET: body}. Only quoted (non-expanding) heredocs."""
    found = {}
    for m in re.finditer(r"^cat > (\S+) <<'(\w+)'\n(.*?)\n\2$", script, re.S | re.M):
        found[m[1]] = m[3]
    return found


def directives(unit_text: str) -> list[str]:
    """A unit's meaningful lines, in order: section headers and Key=Value (comments and blanks dropped)."""
    lines = []
    for raw in unit_text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if "=" in line and not line.startswith("["):
            key, value = line.split("=", 1)
            line = f"{key.strip()}={value.strip()}"
        lines.append(line)
    return lines


def section(lines: list[str], name: str) -> dict[str, str]:
    out, current = {}, None
    for line in lines:
        if line.startswith("["):
            current = line
        elif current == f"[{name}]":
            key, value = line.split("=", 1)
            out[key] = value
    return out


@pytest.fixture(scope="module")
def provider() -> dict[str, Any]:
    return load(PROVIDER)


@pytest.fixture(scope="module")
def consumer() -> dict[str, Any]:
    return load(CONSUMER)


# ---------------------------------------------------------------------------------------- cfn-lint
def cfn_lint_command() -> list[str]:
    script = Path(sys.executable).with_name("cfn-lint")
    if script.exists():
        return [str(script)]
    found = shutil.which("cfn-lint")
    if found:
        return [found]
    pytest.fail("cfn-lint is not installed: pip install -c constraints.txt -e '.[test]'")


def test_deploy_has_the_two_templates() -> None:
    assert PROVIDER in TEMPLATES and CONSUMER in TEMPLATES, TEMPLATES


@pytest.mark.slow  # cfn-lint loads its resource schemas for each run: seconds of CPU
@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_cfn_lint_finds_nothing(template: Path) -> None:
    """Errors, warnings and informational findings, in a few partitions' regions. cfn-lint ships
    its resource schemas, so this runs offline."""
    cmd = [*cfn_lint_command(), "--format", "parseable", "--include-checks", "I",
           "--regions", "us-east-1", "eu-west-1", "ap-southeast-2", "cn-north-1", "us-gov-west-1",
           "--", str(template)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0 and not result.stdout.strip(), (
        f"cfn-lint exit {result.returncode}:\n{result.stdout}{result.stderr}")


@pytest.mark.slow
def test_cfn_lint_is_not_vacuous(tmp_path: Path) -> None:
    """The same invocation does report a broken template (so exit 0 above means something)."""
    broken = tmp_path / "broken.yaml"
    broken.write_text(CONSUMER.read_text().replace("!GetAtt Thing.Colour", "!GetAtt Nowhere.Colour"))
    result = subprocess.run([*cfn_lint_command(), "--format", "parseable", "--", str(broken)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "Nowhere" in result.stdout, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------- provider: messaging
def test_queue_is_encrypted_with_redrive_and_the_daemons_visibility_timeout(provider: dict[str, Any]) -> None:
    from cfn_provider.config import Settings
    from cfn_provider.stores.base import DEFAULT_TTL

    queues = resources(provider, "AWS::SQS::Queue")
    assert set(queues) == {"Queue", "DeadLetterQueue"}
    for name, queue in queues.items():
        props = queue["Properties"]
        assert props.get("SqsManagedSseEnabled") is True, name
        assert props["MessageRetentionPeriod"] == 1209600, name
        assert DEFAULT_TTL > props["MessageRetentionPeriod"], "idempotency records must outlive any message"
    props = queues["Queue"]["Properties"]
    assert props["VisibilityTimeout"] == Settings(queue_url="x").visibility_timeout == 60
    assert props["RedrivePolicy"] == {"deadLetterTargetArn": {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]},
                                      "maxReceiveCount": {"Ref": "MaxReceiveCount"}}
    assert provider["Parameters"]["MaxReceiveCount"]["Default"] == MAX_RECEIVE_COUNT == 10  # the receive budget


def test_queue_policy_lets_only_the_topic_send(provider: dict[str, Any]) -> None:
    policies = [p["Properties"] for p in resources(provider, "AWS::SQS::QueuePolicy").values()
                if {"Ref": "Queue"} in p["Properties"]["Queues"]]
    assert len(policies) == 1
    allows = [s for s in statements(policies[0]["PolicyDocument"]) if s["Effect"] == "Allow"]
    assert len(allows) == 1, allows
    allow = allows[0]
    assert allow["Principal"] == {"Service": "sns.amazonaws.com"}
    assert as_list(allow["Action"]) == ["sqs:SendMessage"]
    assert allow["Resource"] == {"Fn::GetAtt": ["Queue", "Arn"]}
    assert allow["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Ref": "Topic"}}}
    for policy in resources(provider, "AWS::SQS::QueuePolicy").values():  # every other statement denies
        for s in statements(policy["Properties"]["PolicyDocument"]):
            assert s is allow or s["Effect"] == "Deny", s


def test_subscription_is_enveloped_not_raw(provider: dict[str, Any]) -> None:
    _, sub = only(provider, "AWS::SNS::Subscription")
    props = sub["Properties"]
    assert props["Protocol"] == "sqs"
    assert props["TopicArn"] == {"Ref": "Topic"}
    assert props["Endpoint"] == {"Fn::GetAtt": ["Queue", "Arn"]}
    assert props["RawMessageDelivery"] in (False, "false"), "the daemon verifies the SNS envelope's signature"
    assert only(provider, "AWS::SNS::Topic")[0] == "Topic"


def test_state_table_is_what_fleet_mode_expects(provider: dict[str, Any]) -> None:
    from cfn_provider.stores.dynamodb_items import KEY_ATTRIBUTE, TTL_ATTRIBUTE

    _, table = only(provider, "AWS::DynamoDB::Table")
    props = table["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    # the same sparse index of waiting polls as `bootstrap` makes (daemon/ops/bootstrap.py)
    from cfn_provider.ops.bootstrap import _POLL_ATTRIBUTES, _POLL_INDEX_SPEC
    assert props["AttributeDefinitions"] == [{"AttributeName": "pk", "AttributeType": "S"}, *_POLL_ATTRIBUTES]
    assert props["GlobalSecondaryIndexes"] == [_POLL_INDEX_SPEC]


# ---------------------------------------------------------------------------------------- provider: IAM
def test_role_grants_exactly_the_daemons_actions_on_its_queue_and_table(provider: dict[str, Any]) -> None:
    role_name, role = only(provider, "AWS::IAM::Role")
    props = role["Properties"]
    trust = statements(props["AssumeRolePolicyDocument"])
    assert trust == [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]

    granted: dict[str, Any] = {}
    for policy in props["Policies"]:
        for s in statements(policy["PolicyDocument"]):
            assert s["Effect"] == "Allow" and "NotAction" not in s and "NotResource" not in s, s
            for action in as_list(s["Action"]):
                assert "*" not in action, action
                assert action not in granted, f"{action} granted twice"
                granted[action] = s["Resource"]
    assert set(granted) == SQS_ACTIONS | DYNAMODB_ACTIONS
    for action, resource in granted.items():
        assert resource != "*" and "*" not in json.dumps(resource), (action, resource)
        if action.startswith("sqs:"):  # the queue, and its dead-letter queue (the daemon answers what is left there)
            assert resource == [{"Fn::GetAtt": ["Queue", "Arn"]}, {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}], resource
        elif action == "dynamodb:Query":  # only the sparse index of waiting polls, never the table itself
            assert resource == {"Fn::Sub": "${StateTable.Arn}/index/polls"}, resource
        else:
            assert resource == {"Fn::GetAtt": ["StateTable", "Arn"]}, (action, resource)

    # No other way to add permissions: no managed policies unless the SSM switch (default off) is on.
    assert not resources(provider, "AWS::IAM::Policy") and not resources(provider, "AWS::IAM::ManagedPolicy")
    managed = props.get("ManagedPolicyArns")
    if managed is not None:
        condition, when_on, when_off = managed["Fn::If"]
        assert when_off == {"Ref": "AWS::NoValue"}
        assert when_on == [{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"}]
        switch = provider["Conditions"][condition]["Fn::Equals"]
        parameter = next(x["Ref"] for x in switch if isinstance(x, dict))
        assert provider["Parameters"][parameter]["Default"] == "false"
        assert "true" in switch
    _, profile = only(provider, "AWS::IAM::InstanceProfile")
    assert profile["Properties"]["Roles"] == [{"Ref": role_name}]


def _calls(path: Path) -> set[str]:
    """Botocore operations a daemon module calls: `client.receive_message(` / `_call("get_item"`."""
    text = path.read_text()
    found = set(re.findall(r"client\.([a-z_]+)\(", text))
    found |= set(re.findall(r"_(?:call|conditional)\(\s*[\"']([a-z_]+)[\"']", text))
    return found - {"close", "exceptions"}


def test_role_covers_every_call_the_daemon_makes() -> None:
    """The granted actions, read against the code: a new AWS call needs a new grant here."""
    def iam(prefix: str, op: str) -> str:
        # SQS's batch actions have no permission of their own: the single action's grants them
        # (DeleteMessageBatch needs sqs:DeleteMessage; docs.aws.amazon.com .../sqs-batch-api.html)
        action = "".join(part.capitalize() for part in op.split("_"))
        return prefix + (action.removesuffix("Batch") if prefix == "sqs:" else action)

    sqs = {iam("sqs:", op) for op in _calls(REPO / "daemon" / "transports" / "queue.py")}
    dynamodb = {iam("dynamodb:", op) for op in _calls(REPO / "daemon" / "stores" / "dynamodb.py")}
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= sqs and "dynamodb:GetItem" in dynamodb, (sqs, dynamodb)
    assert sqs <= SQS_ACTIONS, f"daemon/transports/queue.py calls {sorted(sqs - SQS_ACTIONS)}: grant them in deploy/provider.yaml"
    assert dynamodb <= DYNAMODB_ACTIONS, (
        f"daemon/stores/dynamodb.py calls {sorted(dynamodb - DYNAMODB_ACTIONS)}: grant them in deploy/provider.yaml")
    # and nothing more: a grant the code never uses is a power a compromised daemon should not have
    assert sqs == SQS_ACTIONS, f"granted but never called: {sorted(SQS_ACTIONS - sqs)}"
    assert dynamodb == DYNAMODB_ACTIONS, f"granted but never called: {sorted(DYNAMODB_ACTIONS - dynamodb)}"
    assert "put_item" not in (REPO / "daemon" / "stores" / "dynamodb.py").read_text()


def test_the_daemons_role_cannot_scan_or_query_the_table(provider: dict[str, Any]) -> None:
    """Listing every stored answer (`cfn-provider requests`) is the operator's: its Scan lives in
    daemon/stores/dynamodb_admin.py, which nothing the daemon runs imports, and the role lacks it.
    The daemon may Query only the sparse index of waiting polls, which holds no bodies."""
    _, role = only(provider, "AWS::IAM::Role")
    grants = [(a.lower(), s.get("Resource")) for policy in role["Properties"]["Policies"]
              for s in statements(policy["PolicyDocument"]) for a in as_list(s["Action"])]
    actions = {a for a, _ in grants}
    assert not actions & {"dynamodb:scan", "dynamodb:partiqlselect", "dynamodb:batchgetitem"}
    queries = [resource for a, resource in grants if a == "dynamodb:query"]
    assert queries == [{"Fn::Sub": "${StateTable.Arn}/index/polls"}], queries
    assert "scan" in _calls(REPO / "daemon" / "stores" / "dynamodb_admin.py")  # the Scan is there, not in the store
    importers = {str(p.relative_to(REPO)) for p in (REPO / "daemon").rglob("*.py")
                 if re.search(r"import\b.*\bdynamodb_admin\b|\bdynamodb_admin\s+import\b", p.read_text())}
    assert importers == {"daemon/ops/requests.py"}, f"only the operator commands may use dynamodb_admin: {importers}"


# ---------------------------------------------------------------------------------------- provider: topic policy
def test_topic_policy_lets_only_this_account_publish_and_only_the_queue_subscribe(provider: dict[str, Any]) -> None:
    """CloudFormation publishes with the stack operation's credentials (no service principal), so
    publishers are bound to the account; a foreign subscription would receive every ResponseURL."""
    _, policy = only(provider, "AWS::SNS::TopicPolicy")
    props = policy["Properties"]
    assert props["Topics"] == [{"Ref": "Topic"}]
    stmts = statements(props["PolicyDocument"])
    for s in stmts:
        assert s["Resource"] == {"Ref": "Topic"}, s
        assert "NotAction" not in s and "NotPrincipal" not in s and "NotResource" not in s, s
    allows = [s for s in stmts if s["Effect"] == "Allow"]
    assert len(allows) == 1, allows
    [allow] = allows
    assert as_list(allow["Action"]) == ["sns:Publish"]
    assert allow["Principal"] == {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}}
    assert "Condition" not in allow
    denies = {s["Sid"]: s for s in stmts if s["Effect"] == "Deny"}
    for s in denies.values():
        assert s["Principal"] == "*"
    foreign = [s for s in denies.values() if as_list(s["Action"]) == ["sns:Publish"]
               and s.get("Condition") == {"StringNotEquals": {"aws:PrincipalAccount": {"Ref": "AWS::AccountId"}}}]
    assert len(foreign) == 1, "publishers of other accounts are denied"
    subscribe = [s for s in denies.values() if as_list(s["Action"]) == ["sns:Subscribe"]]
    assert [s["Condition"] for s in subscribe] == [{"StringNotEquals": {"sns:Endpoint": {"Fn::GetAtt": ["Queue", "Arn"]}}}]
    tls = [s for s in denies.values() if s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}]
    assert len(tls) == 1 and "sns:Publish" in as_list(tls[0]["Action"])
    # the subscription the template makes is the one the policy allows
    _, sub = only(provider, "AWS::SNS::Subscription")
    assert sub["Properties"]["Endpoint"] == {"Fn::GetAtt": ["Queue", "Arn"]}


# ---------------------------------------------------------------------------------------- provider: instances
def test_launch_template_requires_imdsv2_and_uses_the_profile(provider: dict[str, Any]) -> None:
    _, lt = only(provider, "AWS::EC2::LaunchTemplate")
    data = lt["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"].get("HttpPutResponseHopLimit", 1) == 1
    assert data["IamInstanceProfile"] == {"Arn": {"Fn::GetAtt": [only(provider, "AWS::IAM::InstanceProfile")[0], "Arn"]}}
    assert data["ImageId"] == {"Ref": "ImageId"}
    assert provider["Parameters"]["ImageId"]["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    assert "al2023" in provider["Parameters"]["ImageId"]["Default"]
    _, sg = only(provider, "AWS::EC2::SecurityGroup")
    assert "SecurityGroupIngress" not in sg["Properties"], "the daemon listens on nothing"


def test_auto_scaling_group_spans_the_subnets_at_the_desired_capacity(provider: dict[str, Any]) -> None:
    _, asg = only(provider, "AWS::AutoScaling::AutoScalingGroup")
    props = asg["Properties"]
    assert props["VPCZoneIdentifier"] == {"Ref": "VpcSubnetIds"}
    assert provider["Parameters"]["VpcSubnetIds"]["Type"] == "List<AWS::EC2::Subnet::Id>"
    assert props["DesiredCapacity"] == {"Ref": "DesiredCapacity"}
    assert provider["Parameters"]["DesiredCapacity"]["Default"] == 2
    assert props["LaunchTemplate"] == {"LaunchTemplateId": {"Ref": "LaunchTemplate"},
                                       "Version": {"Fn::GetAtt": ["LaunchTemplate", "LatestVersionNumber"]}}


def test_user_data_is_valid_bash_naming_only_template_values(provider: dict[str, Any]) -> None:
    names = set(provider["Parameters"]) | set(provider["Resources"]) | PSEUDO
    script = render(user_data(provider), {n: f"<{n}>" for n in names})
    assert script.startswith("#!/bin/bash\n") and "set -euo pipefail" in script
    bash = shutil.which("bash")
    assert bash
    result = subprocess.run([bash, "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_user_data_installs_the_package_and_enables_the_unit(provider: dict[str, Any]) -> None:
    script = user_data(provider)
    assert "python3.11 -m venv /opt/cfn-provider" in script
    docs = heredocs(script)
    assert docs["/opt/cfn-provider/requirements.in"] == "${PackageSpec}"
    assert "/opt/cfn-provider/bin/pip install" in script and "-r /opt/cfn-provider/requirements.txt" in script
    assert provider["Parameters"]["PackageSpec"]["Default"] == "cfn-sns-provider"
    assert script.rstrip().endswith("systemctl daemon-reload\nsystemctl enable --now cfn-provider")
    # the unit runs what pip installed
    unit = section(directives(docs["/etc/systemd/system/cfn-provider.service"]), "Service")
    assert unit["ExecStart"].split()[0] == "/opt/cfn-provider/bin/cfn-provider"


def test_user_data_environment_file_points_the_daemon_at_this_stack(provider: dict[str, Any]) -> None:
    from cfn_provider.cli import run
    from cfn_provider.pipeline.router import parse_handler_option

    env_text = heredocs(user_data(provider))["/etc/cfn-provider/cfn-provider.env"]
    env = dict(line.split("=", 1) for line in env_text.splitlines() if line and not line.startswith("#"))
    assert env["CFN_PROVIDER_QUEUE_URL"] == "${Queue}"          # Ref of a queue is its URL
    assert env["CFN_PROVIDER_TOPIC_ARN"] == "${Topic}"          # Ref of a topic is its ARN: the allowlist
    assert env["CFN_PROVIDER_REGION"] == "${AWS::Region}"
    assert env["CFN_PROVIDER_STATE"] == "dynamodb://${StateTable}"
    assert env["CFN_PROVIDER_HANDLER"] == "${HandlerSpec}"
    assert env["AWS_REGION"] == "${AWS::Region}"                # the DynamoDB store's region
    known = {p.envvar for p in run.params if getattr(p, "envvar", None)}
    unknown = [k for k in env if k.startswith("CFN_PROVIDER_") and k not in known]
    assert not unknown, f"not options of `cfn-provider run`: {unknown}"
    assert "CFN_PROVIDER_VERIFY_SIGNATURES" not in env and "CFN_PROVIDER_ALLOW_RESPONSE_URL" not in env
    default = provider["Parameters"]["HandlerSpec"]["Default"]
    assert [parse_handler_option(v) for v in default.split()] == [("Custom::Echo", None)]
    # the systemd env file the unit reads: same path in the unit and in the user data
    unit = section(directives(heredocs(user_data(provider))["/etc/systemd/system/cfn-provider.service"]), "Service")
    assert unit["EnvironmentFile"] == "/etc/cfn-provider/cfn-provider.env"


def test_user_data_unit_is_systemd_cfn_provider_service(provider: dict[str, Any]) -> None:
    """The unit is written inline (the instance downloads nothing but the package); it must stay
    systemd/cfn-provider.service in substance. Change both together."""
    inline_text = heredocs(user_data(provider))["/etc/systemd/system/cfn-provider.service"]
    assert "${" not in inline_text, "Fn::Sub would change the unit"
    inline, repo = directives(inline_text), directives(UNIT.read_text())
    for name in ("Unit", "Service", "Install"):
        assert section(inline, name), name
    service, expected = section(inline, "Service"), section(repo, "Service")
    key_lines = ["Type", "NotifyAccess", "WatchdogSec", "ExecStart", "EnvironmentFile", "StateDirectory",
                 "StateDirectoryMode", "DynamicUser", "KillMode", "TimeoutStopSec", "NoNewPrivileges",
                 "CapabilityBoundingSet", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
                 "RestrictAddressFamilies", "SystemCallFilter"]
    for key in key_lines:
        assert service.get(key) == expected[key], f"{key}: {service.get(key)!r} in deploy/provider.yaml, {expected[key]!r} in {UNIT.name}"
    assert service["Type"] == "notify" and int(service["WatchdogSec"]) > 0
    assert inline == repo, "deploy/provider.yaml's unit differs from systemd/cfn-provider.service"


# ---------------------------------------------------------------------------------------- provider: alarms, outputs
def test_alarms_on_dead_letters_and_on_the_oldest_message(provider: dict[str, Any]) -> None:
    alarms = {(a["Properties"]["MetricName"], json.dumps(a["Properties"]["Dimensions"])): a["Properties"]
              for a in resources(provider, "AWS::CloudWatch::Alarm").values()}
    dlq = alarms[("ApproximateNumberOfMessagesVisible",
                  json.dumps([{"Name": "QueueName", "Value": {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]}}]))]
    assert (dlq["ComparisonOperator"], dlq["Threshold"]) == ("GreaterThanThreshold", 0)
    age = alarms[("ApproximateAgeOfOldestMessage",
                  json.dumps([{"Name": "QueueName", "Value": {"Fn::GetAtt": ["Queue", "QueueName"]}}]))]
    assert age["ComparisonOperator"] == "GreaterThanThreshold"
    assert age["Threshold"] == {"Ref": "OldestMessageAgeThreshold"}
    assert provider["Parameters"]["OldestMessageAgeThreshold"]["Default"] == 300
    notify = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    for alarm in (dlq, age):
        assert alarm["Namespace"] == "AWS/SQS"
        assert alarm["AlarmActions"] == notify
    assert provider["Conditions"]["HasAlarmTopic"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]}
    assert provider["Parameters"]["AlarmTopicArn"]["Default"] == ""


def test_outputs_export_the_service_token(provider: dict[str, Any]) -> None:
    outputs = provider["Outputs"]
    assert outputs["ServiceToken"]["Value"] == {"Ref": "Topic"}
    assert outputs["ServiceToken"]["Export"]["Name"] == {"Fn::Sub": "${AWS::StackName}-ServiceToken"}
    assert outputs["QueueUrl"]["Value"] == {"Ref": "Queue"}
    assert outputs["DeadLetterQueueUrl"]["Value"] == {"Ref": "DeadLetterQueue"}
    assert outputs["TableName"]["Value"] == {"Ref": "StateTable"}


# ---------------------------------------------------------------------------------------- consumer
RESERVED = ("ServiceToken", "ServiceTimeout", "Name", "FailWith")  # handlers/echo.py does not echo these


def test_consumer_uses_custom_echo_through_the_providers_service_token(
        consumer: dict[str, Any], provider: dict[str, Any]) -> None:
    from cfn_provider.handlers import echo

    assert set(RESERVED) == set(echo._RESERVED)
    echoes = resources(consumer, "Custom::Echo")
    assert len(echoes) >= 2
    export = provider["Outputs"]["ServiceToken"]["Export"]["Name"]["Fn::Sub"]
    for name, resource in echoes.items():
        token = resource["Properties"]["ServiceToken"]
        condition, imported, given = token["Fn::If"]
        assert given == {"Ref": "ServiceToken"}, name
        sub = imported["Fn::ImportValue"]["Fn::Sub"]
        assert sub.replace("${ProviderStackName}", "${AWS::StackName}") == export, name
        assert consumer["Conditions"][condition] == {"Fn::Equals": [{"Ref": "ServiceToken"}, ""]}
    timeouts = [r["Properties"]["ServiceTimeout"] for r in echoes.values() if "ServiceTimeout" in r["Properties"]]
    assert timeouts and all(1 <= int(t) <= 3600 for t in timeouts)


def test_consumer_outputs_read_echoed_properties_with_getatt(consumer: dict[str, Any]) -> None:
    echoes = resources(consumer, "Custom::Echo")
    getatts = [o["Value"]["Fn::GetAtt"] for o in consumer["Outputs"].values() if "Fn::GetAtt" in o["Value"]]
    assert len(getatts) >= 3
    for logical_id, attribute in getatts:
        assert logical_id in echoes, logical_id
        props = echoes[logical_id]["Properties"]
        assert attribute in props and attribute not in RESERVED, f"{logical_id}.{attribute} is not echoed"
    assert {logical_id for logical_id, _ in getatts} == set(echoes), "every Echo resource has GetAtt outputs"
