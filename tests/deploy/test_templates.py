"""deploy/: the CloudFormation templates lint clean (cfn-lint, offline) and keep their promises.

provider.yaml stands the provider up (topic, queue + DLQ, table, role, launch template, Auto
Scaling group, alarms); example-consumer.yaml uses its ServiceToken with Custom::Echo. Besides
cfn-lint, these tests pin what the templates promise about security (least-privilege role,
queue policy bound to the topic, enveloped delivery, IMDSv2, Session Manager without
AmazonSSMManagedInstanceCore), about launching and watching a fleet (a CreationPolicy that only
instances whose daemon serves can satisfy, with the user data's signal path run for real under
bash; pinned and hashed installs; the log group, its metric filters and alarms that reach a
required topic), and that the unit the user data writes is systemd/cfn-provider.service with its
RandomSecret-key drop-in.
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.pipeline.budget import MAX_RECEIVE_COUNT

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROVIDER = DEPLOY / "provider.yaml"
CONSUMER = DEPLOY / "example-consumer.yaml"
UNIT = REPO / "systemd" / "cfn-provider.service"
DROP_IN = REPO / "systemd" / "random-secret-key.conf"
TEMPLATES = sorted(p for pattern in ("*.yaml", "*.yml", "*.json", "*.template") for p in DEPLOY.glob(pattern))

SQS_ACTIONS = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}
DLQ_ACTIONS = SQS_ACTIONS - {"sqs:GetQueueAttributes"}  # the watcher never reads the DLQ's attributes
# What the instance's set-up and agents use (cfn-provider-instance), never the daemon itself
INSTANCE_ACTIONS = {
    "s3:GetObject",
    "s3:ListBucket",
    "secretsmanager:GetSecretValue",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "logs:DescribeLogStreams",
    "autoscaling:SetInstanceHealth",
    "autoscaling:CompleteLifecycleAction",
    "autoscaling:DescribeAutoScalingInstances",
    "kms:Decrypt",
}
SESSION_MANAGER_ACTIONS = {
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
}
DYNAMODB_ACTIONS = {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query"}
PSEUDO = {
    "AWS::AccountId",
    "AWS::NotificationARNs",
    "AWS::NoValue",
    "AWS::Partition",
    "AWS::Region",
    "AWS::StackId",
    "AWS::StackName",
    "AWS::URLSuffix",
}


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
    cmd = [
        *cfn_lint_command(),
        "--format",
        "parseable",
        "--include-checks",
        "I",
        "--regions",
        "us-east-1",
        "eu-west-1",
        "ap-southeast-2",
        "cn-north-1",
        "us-gov-west-1",
        "--",
        str(template),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0 and not result.stdout.strip(), (
        f"cfn-lint exit {result.returncode}:\n{result.stdout}{result.stderr}"
    )


@pytest.mark.slow
def test_cfn_lint_is_not_vacuous(tmp_path: Path) -> None:
    """The same invocation does report a broken template (so exit 0 above means something)."""
    broken = tmp_path / "broken.yaml"
    broken.write_text(CONSUMER.read_text().replace("!GetAtt Thing.Colour", "!GetAtt Nowhere.Colour"))
    result = subprocess.run(
        [*cfn_lint_command(), "--format", "parseable", "--", str(broken)], capture_output=True, text=True, timeout=300
    )
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
    assert props["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]},
        "maxReceiveCount": {"Ref": "MaxReceiveCount"},
    }
    assert provider["Parameters"]["MaxReceiveCount"]["Default"] == MAX_RECEIVE_COUNT == 10  # the receive budget


def test_queue_policy_lets_only_the_topic_send(provider: dict[str, Any]) -> None:
    policies = [
        p["Properties"]
        for p in resources(provider, "AWS::SQS::QueuePolicy").values()
        if {"Ref": "Queue"} in p["Properties"]["Queues"]
    ]
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
    assert (
        props["KeySchema"]
        == [{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}]
        == [{"AttributeName": "pk", "KeyType": "HASH"}]
    )
    assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    # the same sparse index of waiting polls as `bootstrap` makes (daemon/ops/bootstrap.py)
    from cfn_provider.ops.bootstrap_table import _POLL_ATTRIBUTES, _POLL_INDEX_SPEC

    assert props["AttributeDefinitions"] == [{"AttributeName": "pk", "AttributeType": "S"}, *_POLL_ATTRIBUTES]
    assert props["GlobalSecondaryIndexes"] == [_POLL_INDEX_SPEC]


# ---------------------------------------------------------------------------------------- provider: IAM
def _grants(role: dict[str, Any], policy_name: str) -> dict[str, list[Any]]:
    """action -> the resources it is granted on, in the role's inline policy `policy_name`."""
    [policy] = [p for p in role["Properties"]["Policies"] if p["PolicyName"] == policy_name]
    granted: dict[str, list[Any]] = {}
    for s in statements(policy["PolicyDocument"]):
        assert s["Effect"] == "Allow" and "NotAction" not in s and "NotResource" not in s, s
        for action in as_list(s["Action"]):
            assert "*" not in action, action
            granted.setdefault(action, []).append(s["Resource"])
    return granted


def test_role_grants_exactly_the_daemons_actions_on_its_queue_and_table(provider: dict[str, Any]) -> None:
    role_name, role = only(provider, "AWS::IAM::Role")
    props = role["Properties"]
    trust = statements(props["AssumeRolePolicyDocument"])
    assert trust == [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]
    assert sorted(p["PolicyName"] for p in props["Policies"]) == ["cfn-provider", "cfn-provider-instance"]

    granted = _grants(role, "cfn-provider")
    assert set(granted) == SQS_ACTIONS | DYNAMODB_ACTIONS
    queue, dlq = {"Fn::GetAtt": ["Queue", "Arn"]}, {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}
    for action, resources_ in granted.items():
        assert "*" not in json.dumps(resources_), (action, resources_)
        if action.startswith("sqs:"):  # the queue; the dead-letter queue without GetQueueAttributes
            assert resources_ == ([queue, dlq] if action in DLQ_ACTIONS else [queue]), (action, resources_)
        elif action == "dynamodb:Query":  # only the sparse index of waiting polls, never the table itself
            assert resources_ == [{"Fn::Sub": "${StateTable.Arn}/index/polls"}], resources_
        else:
            assert resources_ == [{"Fn::GetAtt": ["StateTable", "Arn"]}], (action, resources_)

    # The instance's own needs, each on exactly its resource
    instance = _grants(role, "cfn-provider-instance")
    assert set(instance) == INSTANCE_ACTIONS
    assert instance["s3:GetObject"] == [
        {"Fn::Sub": "arn:${AWS::Partition}:s3:::${WheelhouseBucket}/${WheelhousePrefix}*"}
    ]
    assert instance["s3:ListBucket"] == [{"Fn::Sub": "arn:${AWS::Partition}:s3:::${WheelhouseBucket}"}]
    assert instance["secretsmanager:GetSecretValue"] == [{"Ref": "RandomSecretKeyPolicy"}]  # the secret's ARN
    assert instance["kms:Decrypt"] == [{"Fn::Sub": "arn:${AWS::Partition}:kms:${AWS::Region}:${AWS::AccountId}:key/*"}]
    assert instance["autoscaling:DescribeAutoScalingInstances"] == ["*"]  # takes no resource ARN
    assert instance["autoscaling:CompleteLifecycleAction"] == instance["autoscaling:SetInstanceHealth"]
    for action in ("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"):
        assert instance[action] == [{"Fn::GetAtt": ["LogGroup", "Arn"]}], action
    [asg_arn] = instance["autoscaling:SetInstanceHealth"]
    assert asg_arn["Fn::Sub"].endswith(":autoScalingGroup:*:autoScalingGroupName/${AWS::StackName}-AutoScalingGroup-*")

    # Handlers' permissions come only from HandlerPolicyArns (empty by default), not by editing the role
    assert props["ManagedPolicyArns"] == {
        "Fn::If": ["HasHandlerPolicies", {"Ref": "HandlerPolicyArns"}, {"Ref": "AWS::NoValue"}]
    }
    assert provider["Parameters"]["HandlerPolicyArns"] == {
        **provider["Parameters"]["HandlerPolicyArns"],
        "Type": "CommaDelimitedList",
        "Default": "",
    }
    assert provider["Conditions"]["HasHandlerPolicies"] == {
        "Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "HandlerPolicyArns"}]}, ""]}]
    }
    assert not resources(provider, "AWS::IAM::ManagedPolicy")
    _, profile = only(provider, "AWS::IAM::InstanceProfile")
    assert profile["Properties"]["Roles"] == [{"Ref": role_name}]


def test_session_manager_gets_only_its_channels_and_only_when_asked(provider: dict[str, Any]) -> None:
    """Not AmazonSSMManagedInstanceCore: its ssm:GetParameter(s) on * would let every handler read
    every parameter, SecureStrings included."""
    assert "AmazonSSMManagedInstanceCore" not in json.dumps(provider)
    name, policy = only(provider, "AWS::IAM::Policy")
    assert policy["Condition"] == "SsmAccess"
    assert provider["Conditions"]["SsmAccess"] == {"Fn::Equals": [{"Ref": "EnableSsmAccess"}, "true"]}
    assert provider["Parameters"]["EnableSsmAccess"]["Default"] == "false"
    assert policy["Properties"]["Roles"] == [{"Ref": "InstanceRole"}]
    [statement] = statements(policy["Properties"]["PolicyDocument"])
    assert statement["Effect"] == "Allow" and set(statement["Action"]) == SESSION_MANAGER_ACTIONS
    assert statement["Resource"] == "*"  # these actions take no resource ARN


def _calls(path: Path) -> set[str]:
    """Botocore operations a daemon module calls: `client.receive_message(` / `_call("get_item"`."""
    text = path.read_text()
    found = set(re.findall(r"client\.([a-z_]+)\(", text))
    found |= set(re.findall(r"_(?:call|conditional)\(\s*[\"']([a-z_]+)[\"']", text))
    return found - {"close", "exceptions"}


def dynamodb_store_calls() -> set[str]:
    """The DynamoDB operations the daemon's store makes: stores/dynamodb*.py, except the operator's
    listing (dynamodb_admin.py, whose Scan the role must not have)."""
    stores = REPO / "daemon" / "stores"
    return {op for path in stores.glob("dynamodb*.py") if path.name != "dynamodb_admin.py" for op in _calls(path)}


def iam(prefix: str, op: str) -> str:
    """The IAM action a botocore operation needs. SQS's batch actions have no permission of their
    own: the single action's grants them (DeleteMessageBatch needs sqs:DeleteMessage;
    docs.aws.amazon.com .../sqs-batch-api.html)."""
    action = "".join(part.capitalize() for part in op.split("_"))
    return prefix + (action.removesuffix("Batch") if prefix == "sqs:" else action)


def test_role_covers_every_call_the_daemon_makes() -> None:
    """The granted actions, read against the code: a new AWS call needs a new grant here."""
    sqs = {iam("sqs:", op) for op in _calls(REPO / "daemon" / "transports" / "queue.py")}
    dynamodb = {iam("dynamodb:", op) for op in dynamodb_store_calls()}
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= sqs and "dynamodb:GetItem" in dynamodb, (sqs, dynamodb)
    assert sqs <= SQS_ACTIONS, (
        f"daemon/transports/queue.py calls {sorted(sqs - SQS_ACTIONS)}: grant them in deploy/provider.yaml"
    )
    assert dynamodb <= DYNAMODB_ACTIONS, (
        f"daemon/stores/dynamodb*.py call {sorted(dynamodb - DYNAMODB_ACTIONS)}: grant them in deploy/provider.yaml"
    )
    # and nothing more: a grant the code never uses is a power a compromised daemon should not have
    assert sqs == SQS_ACTIONS, f"granted but never called: {sorted(SQS_ACTIONS - sqs)}"
    assert dynamodb == DYNAMODB_ACTIONS, f"granted but never called: {sorted(DYNAMODB_ACTIONS - dynamodb)}"
    assert "put_item" not in dynamodb_store_calls()
    # The dead-letter watcher receives, deletes and hides on the DLQ; it never reads the DLQ's
    # attributes (the RedrivePolicy is read on the main queue), so the DLQ is not granted that.
    from cfn_provider.intake.dead_letters import DeadLetterWatcher

    source = inspect.getsource(DeadLetterWatcher)
    on_the_dlq = set(re.findall(r"self\.queue\.([a-z_]+)", source))
    assert on_the_dlq == {"receive", "delete", "set_visibility", "max_batch"}, on_the_dlq


def test_template_role_and_bootstrap_policy_grant_the_same_daemon_actions(provider: dict[str, Any]) -> None:
    """`bootstrap` prints a policy for the daemon's role; it must be the template's, action for action."""
    from cfn_provider.ops.policies import daemon_policy

    printed = daemon_policy(
        queue_arn="arn:aws:sqs:eu-west-1:1:q",
        dlq_arn="arn:aws:sqs:eu-west-1:1:q-dlq",
        table_arn="arn:aws:dynamodb:eu-west-1:1:table/t",
    )
    actions = {a for s in printed["Statement"] for a in as_list(s["Action"])}
    _, role = only(provider, "AWS::IAM::Role")
    assert actions == set(_grants(role, "cfn-provider"))


def test_the_daemons_role_cannot_scan_or_query_the_table(provider: dict[str, Any]) -> None:
    """Listing every stored answer (`cfn-provider requests`) is the operator's: its Scan lives in
    daemon/stores/dynamodb_admin.py, which nothing the daemon runs imports, and the role lacks it.
    The daemon may Query only the sparse index of waiting polls, which holds no bodies."""
    _, role = only(provider, "AWS::IAM::Role")
    grants = [
        (a.lower(), s.get("Resource"))
        for policy in role["Properties"]["Policies"]
        for s in statements(policy["PolicyDocument"])
        for a in as_list(s["Action"])
    ]
    actions = {a for a, _ in grants}
    assert not actions & {"dynamodb:scan", "dynamodb:partiqlselect", "dynamodb:batchgetitem"}
    queries = [resource for a, resource in grants if a == "dynamodb:query"]
    assert queries == [{"Fn::Sub": "${StateTable.Arn}/index/polls"}], queries
    assert "scan" in _calls(REPO / "daemon" / "stores" / "dynamodb_admin.py")  # the Scan is there, not in the store
    importers = {
        str(p.relative_to(REPO))
        for p in (REPO / "daemon").rglob("*.py")
        if re.search(r"import\b.*\bdynamodb_admin\b|\bdynamodb_admin\s+import\b", p.read_text())
    }
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
    foreign = [
        s
        for s in denies.values()
        if as_list(s["Action"]) == ["sns:Publish"]
        and s.get("Condition") == {"StringNotEquals": {"aws:PrincipalAccount": {"Ref": "AWS::AccountId"}}}
    ]
    assert len(foreign) == 1, "publishers of other accounts are denied"
    subscribe = [s for s in denies.values() if as_list(s["Action"]) == ["sns:Subscribe"]]
    assert [s["Condition"] for s in subscribe] == [
        {"StringNotEquals": {"sns:Endpoint": {"Fn::GetAtt": ["Queue", "Arn"]}}}
    ]
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
    assert data["IamInstanceProfile"] == {
        "Arn": {"Fn::GetAtt": [only(provider, "AWS::IAM::InstanceProfile")[0], "Arn"]}
    }
    assert data["ImageId"] == {"Ref": "ImageId"}
    assert provider["Parameters"]["ImageId"]["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    assert "al2023" in provider["Parameters"]["ImageId"]["Default"]
    _, sg = only(provider, "AWS::EC2::SecurityGroup")
    assert "SecurityGroupIngress" not in sg["Properties"], "the daemon listens on nothing"


def test_auto_scaling_group_spans_the_subnets_at_the_desired_capacity(provider: dict[str, Any]) -> None:
    _, asg = only(provider, "AWS::AutoScaling::AutoScalingGroup")
    props = asg["Properties"]
    # VPCZoneIdentifier (SubnetIdA, SubnetIdB, MoreSubnetIds) is resolved under parameter values, and
    # the Rules that keep its subnets in two zones of VpcId are run, in test_provider_subnets.py
    assert props["DesiredCapacity"] == {"Ref": "DesiredCapacity"}
    assert provider["Parameters"]["DesiredCapacity"]["Default"] == 2
    assert props["LaunchTemplate"] == {
        "LaunchTemplateId": {"Ref": "LaunchTemplate"},
        "Version": {"Fn::GetAtt": ["LaunchTemplate", "LatestVersionNumber"]},
    }


def test_user_data_is_valid_bash_naming_only_template_values(provider: dict[str, Any]) -> None:
    names = set(provider["Parameters"]) | set(provider["Resources"]) | PSEUDO
    script = render(user_data(provider), {n: f"<{n}>" for n in names})
    assert script.startswith("#!/bin/bash\n") and "set -Eeuo pipefail" in script
    bash = shutil.which("bash")
    assert bash
    result = subprocess.run([bash, "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def sections(script: str) -> dict[str, str]:
    """The user data's parts: "" before the first `# --- NAME` line, then each part by its first word."""
    parts = re.split(r"^# --- ", script, flags=re.M)
    found = {"": parts[0]}
    for part in parts[1:]:
        found[re.split(r"[\s:]", part, maxsplit=1)[0]] = "# --- " + part
    return found


def rendered(provider: dict[str, Any], **values: str) -> str:
    names = set(provider["Parameters"]) | set(provider["Resources"]) | PSEUDO
    return render(user_data(provider), {**{n: f"<{n}>" for n in names}, **values})


def test_user_data_installs_pinned_hashed_packages_and_enables_the_unit(provider: dict[str, Any]) -> None:
    script = user_data(provider)
    assert "python3.11 -m venv /opt/cfn-provider" in script
    docs = heredocs(script)
    assert docs["/opt/cfn-provider/package-spec.txt"] == "${PackageSpec}"
    # pip only ever installs the wheelhouse's hashed requirements file, with --require-hashes
    installs = [line.strip() for line in script.splitlines() if "/opt/cfn-provider/bin/pip install" in line]
    assert installs and all("--require-hashes" in line for line in installs), installs
    assert "-r /opt/cfn-provider/wheelhouse/requirements.txt" in script
    assert "/opt/cfn-provider/bin/pip check" in script
    # the unit runs what pip installed
    unit = section(directives(docs["/etc/systemd/system/cfn-provider.service"]), "Service")
    assert unit["ExecStart"].split()[0] == "/opt/cfn-provider/bin/cfn-provider"
    last = [line for line in script.rstrip().splitlines()[-7:]]
    assert last == [
        "systemctl enable --now cfn-provider",
        "systemctl enable cfn-provider-lifecycle.service",
        "systemctl start --no-block cfn-provider-lifecycle.service",
        "STATE_DIRECTORY=/var/lib/cfn-provider /opt/cfn-provider/bin/cfn-provider check "
        "--config /etc/cfn-provider/config.toml",
        "systemctl enable --now cfn-provider-health.timer",
        "trap - ERR EXIT",
        'signal 0 "cfn-provider serves its queue"',
    ], last


def test_package_spec_is_required_and_pinned(provider: dict[str, Any]) -> None:
    spec = provider["Parameters"]["PackageSpec"]
    assert "Default" not in spec, "no unpinned default: each scale-out would resolve fresh versions"
    pattern = re.compile(spec["AllowedPattern"])
    for good in ("cfn-sns-provider==0.2.0", "cfn-sns-provider==0.2.0 my_handlers==2.3.post1"):
        assert pattern.match(good), good
    for bad in (
        "cfn-sns-provider",
        "cfn-sns-provider>=0.2",
        "cfn-sns-provider==0.2.0  x==1",
        "x==1; rm -rf /",
        "cfn-sns-provider @ https://example.com/x.whl",
        "x==1\nrm",
        "x==$(id)",
        "",
    ):
        assert not pattern.match(bad), bad
    for name in ("WheelhouseBucket", "AlarmTopicArn", "ReleaseSha256"):
        assert "Default" not in provider["Parameters"][name], name
    index = re.compile(provider["Parameters"]["PackageIndexUrl"]["AllowedPattern"])
    assert index.match("") and index.match("https://pypi.internal.example/simple/")
    for bad in ("http://pypi.internal.example/simple/", "https://x/' ; id", "https://x/$(id)", "https://x/`id`"):
        assert not index.match(bad), bad
    prefix = re.compile(provider["Parameters"]["WheelhousePrefix"]["AllowedPattern"])
    assert prefix.match("") and prefix.match("cfn-provider/0.2.0/") and not prefix.match("x' y/")


def test_user_data_environment_and_config_point_the_daemon_at_this_stack(provider: dict[str, Any]) -> None:
    from cfn_provider.cli import run
    from cfn_provider.config import load_config_file
    from cfn_provider.pipeline.router import parse_handler_option

    docs = heredocs(user_data(provider))
    env = dict(
        line.split("=", 1)
        for line in docs["/etc/cfn-provider/cfn-provider.env"].splitlines()
        if line and not line.startswith("#")
    )
    assert env == {
        "CFN_PROVIDER_CONFIG": "/etc/cfn-provider/config.toml",
        "CFN_PROVIDER_HANDLER": "${HandlerSpec}",
        "AWS_REGION": "${AWS::Region}",
        "AWS_DEFAULT_REGION": "${AWS::Region}",
    }
    known = {p.envvar for p in run.params if getattr(p, "envvar", None)}
    assert {k for k in env if k.startswith("CFN_PROVIDER_")} <= known
    default = provider["Parameters"]["HandlerSpec"]["Default"]
    assert [parse_handler_option(v) for v in default.split()] == [("Custom::Echo", None)]

    # the config file, rendered as CloudFormation would, is one `run` (and `check --config`) reads
    config = render(
        docs["/etc/cfn-provider/config.toml"],
        {
            "Queue": "https://sqs.eu-west-1.amazonaws.com/123456789012/q",
            "AWS::Region": "eu-west-1",
            "Topic": "arn:aws:sns:eu-west-1:123456789012:t",
            "StateTable": "tbl",
            "AWS::StackName": "s",
        },
    )
    path = Path(tempfile.mkdtemp()) / "config.toml"
    path.write_text(config)
    values = load_config_file(path)
    assert values == {
        "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/q",
        "region": "eu-west-1",
        "topic_arn": ["arn:aws:sns:eu-west-1:123456789012:t"],
        "state": "dynamodb://tbl",
    }
    assert set(values) <= {p.name for p in run.params}
    assert "verify_signatures" not in values and "allow_response_url" not in values
    unit = section(directives(docs["/etc/systemd/system/cfn-provider.service"]), "Service")
    assert unit["EnvironmentFile"] == "/etc/cfn-provider/cfn-provider.env"


def test_user_data_unit_is_systemd_cfn_provider_service(provider: dict[str, Any]) -> None:
    """The unit and its drop-in are written inline (the instance downloads nothing but packages);
    they must stay systemd/cfn-provider.service and systemd/random-secret-key.conf. Change both together."""
    docs = heredocs(user_data(provider))
    inline_text = docs["/etc/systemd/system/cfn-provider.service"]
    assert "${" not in inline_text, "Fn::Sub would change the unit"
    inline, repo = directives(inline_text), directives(UNIT.read_text())
    for name in ("Unit", "Service", "Install"):
        assert section(inline, name), name
    service, expected = section(inline, "Service"), section(repo, "Service")
    key_lines = [
        "Type",
        "NotifyAccess",
        "WatchdogSec",
        "ExecStart",
        "EnvironmentFile",
        "StateDirectory",
        "StateDirectoryMode",
        "DynamicUser",
        "KillMode",
        "TimeoutStopSec",
        "NoNewPrivileges",
        "CapabilityBoundingSet",
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
        "PrivateDevices",
        "RestrictAddressFamilies",
        "MemoryDenyWriteExecute",
        "PrivateUsers",
    ]
    for key in key_lines:
        assert service.get(key) == expected[key], (
            f"{key}: {service.get(key)!r} in deploy/provider.yaml, {expected[key]!r} in {UNIT.name}"
        )
    assert service["Type"] == "notify" and int(service["WatchdogSec"]) > 0
    assert inline == repo, "deploy/provider.yaml's unit differs from systemd/cfn-provider.service"
    drop_in = docs["/etc/systemd/system/cfn-provider.service.d/random-secret-key.conf"]
    assert directives(drop_in) == directives(DROP_IN.read_text())
    assert (
        section(directives(drop_in), "Service")["LoadCredential"]
        == "random-secret-key:/etc/cfn-provider/random-secret-key"
    )


def test_random_secret_key_comes_from_one_secret(provider: dict[str, Any]) -> None:
    _, secret = only(provider, "AWS::SecretsManager::Secret")
    assert secret["DeletionPolicy"] == "Retain", "losing the key loses every RandomSecret's re-derivation"
    generated = secret["Properties"]["GenerateSecretString"]
    assert generated["PasswordLength"] >= 32 and "SecretStringTemplate" not in generated
    script = user_data(provider)
    fetch = script[script.index("aws secretsmanager get-secret-value") :]
    fetch = fetch[: fetch.index(")")]
    assert "--secret-id '${RandomSecretKeyPolicy}'" in fetch and "> /etc/cfn-provider/random-secret-key" in fetch
    assert "(umask 077 && aws secretsmanager" in script  # never readable by others, not even for a moment


def test_launch_template_encrypts_the_root_volume(provider: dict[str, Any]) -> None:
    _, lt = only(provider, "AWS::EC2::LaunchTemplate")
    [root] = lt["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"]
    assert root["DeviceName"] == "/dev/xvda"  # Amazon Linux 2023's root device
    assert root["Ebs"]["Encrypted"] is True


# ---------------------------------------------------------------------------------------- provider: launching
def test_the_group_waits_for_one_signal_per_instance(provider: dict[str, Any]) -> None:
    name, asg = only(provider, "AWS::AutoScaling::AutoScalingGroup")
    signal = asg["CreationPolicy"]["ResourceSignal"]
    assert signal["Count"] == {"Ref": "DesiredCapacity"}
    assert re.fullmatch(r"PT(\d+)M", signal["Timeout"]) and 5 <= int(signal["Timeout"][2:-1]) <= 30
    assert asg["UpdatePolicy"] == {"AutoScalingReplacingUpdate": {"WillReplace": True}}  # uses the CreationPolicy
    script = user_data(provider)
    assert f"--resource {name}" in script and "--stack '${AWS::StackName}'" in script


def _signal_run(provider: dict[str, Any], body: str, tmp_path: Path, **stub_rc: int) -> tuple[int, list[str]]:
    """The user data's first lines and its `signal` part, then `body`, under bash with stubs for
    cfn-signal (records its arguments), aws (records its arguments in tmp_path/aws; names the group),
    ec2-metadata, systemctl and cfn-provider (exit codes from stub_rc)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    record = tmp_path / "signals"
    (bin_dir / "cfn-signal").write_text(f'#!/bin/sh\nprintf "%s|" "$@" >> {record}\necho >> {record}\n')
    calls = tmp_path / "aws"
    (bin_dir / "aws").write_text(f'#!/bin/sh\nprintf "%s|" "$@" >> {calls}\necho >> {calls}\necho the-group\n')
    (bin_dir / "ec2-metadata").write_text("#!/bin/sh\necho 'instance-id: i-0123'\n")
    for stub, rc in {"systemctl": stub_rc.get("systemctl", 0), "cfn-provider": stub_rc.get("check", 0)}.items():
        (bin_dir / stub).write_text(f"#!/bin/sh\nexit {rc}\n")
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    parts = sections(rendered(provider, **{"AWS::StackName": "prov", "AWS::Region": "eu-west-1"}))
    body = body.replace("/opt/cfn-provider/bin/cfn-provider", str(bin_dir / "cfn-provider"))
    script = parts[""] + parts["signal"] + body
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=30, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}
    )
    signals = record.read_text().splitlines() if record.exists() else []
    return result.returncode, signals


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
def test_a_failing_step_signals_failure_once(provider: dict[str, Any], tmp_path: Path) -> None:
    rc, signals = _signal_run(provider, "true\nfalse\necho never\nsignal 0 ok\n", tmp_path)
    assert rc == 1
    [sent] = signals
    args = sent.split("|")
    assert args[:2] == ["--exit-code", "1"], args
    assert "line" in args[3] and "set-up failed" in args[3], args
    assert args[4:10] == ["--stack", "prov", "--resource", "AutoScalingGroup", "--region", "eu-west-1"], args


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
def test_an_exit_without_an_error_still_signals_failure(provider: dict[str, Any], tmp_path: Path) -> None:
    rc, signals = _signal_run(provider, "exit 0\n", tmp_path)
    assert [s.split("|")[:2] for s in signals] == [["--exit-code", "1"]]
    rc, signals = _signal_run(provider, "echo $UNSET_VARIABLE\n", tmp_path / "unset")  # set -u
    assert rc != 0 and [s.split("|")[:2] for s in signals] == [["--exit-code", str(rc)]]


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
def test_success_is_signalled_only_after_the_unit_started_and_check_passed(
    provider: dict[str, Any], tmp_path: Path
) -> None:
    start = sections(rendered(provider))["start"]
    rc, signals = _signal_run(provider, start, tmp_path / "ok")
    assert rc == 0 and [s.split("|")[:2] for s in signals] == [["--exit-code", "0"]]
    # `systemctl enable --now` fails when the notify unit never gets READY (no successful receive)
    rc, signals = _signal_run(provider, start, tmp_path / "unit", systemctl=1)
    assert rc == 1 and [s.split("|")[:2] for s in signals] == [["--exit-code", "1"]]
    rc, signals = _signal_run(provider, start, tmp_path / "check", check=1)
    assert rc == 1 and [s.split("|")[:2] for s in signals] == [["--exit-code", "1"]]


def test_user_data_is_small_enough_for_ec2(provider: dict[str, Any]) -> None:
    assert len(rendered(provider).encode()) < 16384, "EC2 takes at most 16 KB of user data"


def test_health_beyond_ec2s_runs_cfn_provider_check(provider: dict[str, Any]) -> None:
    docs = heredocs(user_data(provider))
    health = docs["/usr/local/sbin/cfn-provider-health"]
    assert "cfn-provider check --local-faults-only --config /etc/cfn-provider/config.toml" in health
    assert "set-instance-health" in health and "--health-status Unhealthy" in health
    timer = section(directives(docs["/etc/systemd/system/cfn-provider-health.timer"]), "Timer")
    assert timer["OnUnitInactiveSec"] == "2min"
    assert "systemctl enable --now cfn-provider-health.timer" in user_data(provider)


# ---------------------------------------------------------------------------------------- provider: logs
def test_logs_are_shipped_to_a_log_group_with_retention(provider: dict[str, Any]) -> None:
    name, group = only(provider, "AWS::Logs::LogGroup")
    props = group["Properties"]
    assert props["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert props["KmsKeyId"] == {"Fn::If": ["HasLogKmsKey", {"Ref": "LogKmsKeyArn"}, {"Ref": "AWS::NoValue"}]}
    assert provider["Parameters"]["LogKmsKeyArn"]["Default"] == ""
    docs = heredocs(user_data(provider))
    journal = section(directives(docs["/etc/systemd/system/cfn-provider-journal.service"]), "Service")
    assert "--unit=cfn-provider.service" in journal["ExecStart"] and "--output=cat" in journal["ExecStart"]
    log_file = journal["StandardOutput"].removeprefix("append:")
    agent = json.loads(
        render(
            docs["/opt/aws/amazon-cloudwatch-agent/etc/cfn-provider.json"],
            {"AWS::Region": "eu-west-1", name: "the-group"},
        )
    )
    collected = agent["logs"]["logs_collected"]["files"]["collect_list"]
    assert {(c["file_path"], c["log_group_name"]) for c in collected} == {
        (log_file, "the-group"),
        ("/var/log/cloud-init-output.log", "the-group"),
    }
    assert "amazon-cloudwatch-agent-ctl -a fetch-config" in user_data(provider)
    assert log_file in docs["/etc/logrotate.d/cfn-provider"] and "copytruncate" in docs["/etc/logrotate.d/cfn-provider"]


def test_journal_unit_is_valid_for_systemd(provider: dict[str, Any], tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: .ci/run installs Debian's systemd package"
    docs = heredocs(user_data(provider))
    for target in ("/etc/systemd/system/cfn-provider-journal.service", "/etc/systemd/system/cfn-provider-health.timer"):
        path = tmp_path / Path(target).name
        path.write_text(docs[target])
    for unit in ("health", "lifecycle"):
        (tmp_path / f"cfn-provider-{unit}.service").write_text(
            docs[f"/etc/systemd/system/cfn-provider-{unit}.service"].replace(
                f"/usr/local/sbin/cfn-provider-{unit}", "/bin/true"
            )
        )
    for unit in ("journal", "health", "lifecycle"):  # with the sandbox drop-in the user data links in
        (tmp_path / f"cfn-provider-{unit}.service.d").mkdir()
        (tmp_path / f"cfn-provider-{unit}.service.d" / "sandbox.conf").write_text(
            docs["/etc/systemd/system/cfn-provider-sandbox.conf"]
        )
    for unit in (
        "cfn-provider-journal.service",
        "cfn-provider-health.service",
        "cfn-provider-health.timer",
        "cfn-provider-lifecycle.service",
    ):
        result = subprocess.run([analyze, "verify", str(tmp_path / unit)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and unit not in result.stderr, result.stdout + result.stderr


def test_metric_filters_count_the_events_the_runbook_acts_on(provider: dict[str, Any]) -> None:
    from cfn_provider import logs  # noqa: F401  (the events are the daemon's own names)

    filters = resources(provider, "AWS::Logs::MetricFilter")
    patterns = {}
    for f in filters.values():
        props = f["Properties"]
        assert props["LogGroupName"] == {"Ref": "LogGroup"}
        [metric] = props["MetricTransformations"]
        assert metric["MetricValue"] == "1" and metric["MetricNamespace"] == {
            "Fn::Sub": "cfn-provider/${AWS::StackName}"
        }
        events = re.findall(r'\$\.event = "([a-z_.]+)"', props["FilterPattern"])
        if not events:  # a plain-text line (cloud-init, systemd): tests/deploy/test_fleet_lifecycle.py
            continue
        for event in events:
            patterns[event] = metric["MetricName"]
    assert set(patterns) == {
        "deadletter.answered",
        "deadletter.arrived",
        "deadletter.receive_failed",
        "security",
        "store.unreachable",
        "message.received_again",
        "queue.receive_failed",
        "handler.raised",
        "message.crashed",
        "response.undeliverable",
    }
    code = "\n".join(p.read_text() for p in (REPO / "daemon").rglob("*.py"))
    for event in patterns:  # each is an event the daemon logs
        assert f'"{event}"' in code, event
    alarms = {
        a["Properties"].get("MetricName"): (n, a) for n, a in resources(provider, "AWS::CloudWatch::Alarm").items()
    }
    for metric in patterns.values():
        name, alarm = alarms[metric]
        props = alarm["Properties"]
        assert props["Namespace"] == {"Fn::Sub": "cfn-provider/${AWS::StackName}"}
        assert (props["Statistic"], props["ComparisonOperator"]) == ("Sum", "GreaterThanThreshold")
        assert props["Threshold"] >= 0
        assert props["TreatMissingData"] == "notBreaching"


# ---------------------------------------------------------------------------------------- provider: alarms, outputs
def _math(alarm: dict[str, Any]) -> tuple[str, dict[str, tuple[str, str, str]]]:
    """(expression, {id: (metric, queue logical id, stat)}) of a metric-math alarm."""
    expression = [m["Expression"] for m in alarm["Metrics"] if m.get("ReturnData")]
    assert len(expression) == 1, alarm["Metrics"]
    inputs = {}
    for m in alarm["Metrics"]:
        if "MetricStat" in m:
            assert m["ReturnData"] is False
            metric = m["MetricStat"]["Metric"]
            assert metric["Namespace"] == "AWS/SQS"
            [dimension] = metric["Dimensions"]
            inputs[m["Id"]] = (metric["MetricName"], dimension["Value"]["Fn::GetAtt"][0], m["MetricStat"]["Stat"])
    return expression[0], inputs


def test_every_alarm_tells_the_required_topic(provider: dict[str, Any]) -> None:
    alarms = resources(provider, "AWS::CloudWatch::Alarm")
    assert len(alarms) == 13
    for name, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": "AlarmTopicArn"}], name
        assert alarm["Properties"]["OKActions"] == [{"Ref": "AlarmTopicArn"}], name
    parameter = provider["Parameters"]["AlarmTopicArn"]
    assert "Default" not in parameter and not re.match(parameter["AllowedPattern"], "")
    assert "HasAlarmTopic" not in provider.get("Conditions", {})


def test_dead_letter_alarm_counts_arrivals_not_what_is_there(provider: dict[str, Any]) -> None:
    """A message left for the operator would keep a depth alarm in ALARM for days, and the next
    dead letter would notify nobody: the alarm counts `deadletter.arrived` lines (each message once
    per daemon, tests/integration/test_dead_letters.py), which go quiet again after a minute."""
    alarm = resources(provider, "AWS::CloudWatch::Alarm")["DeadLetterQueueAlarm"]
    props = alarm["Properties"]
    assert (props["MetricName"], props["Statistic"], props["Period"]) == ("DeadLetterArrivals", "Sum", 60)
    assert "Metrics" not in props and "ApproximateNumberOfMessagesVisible" not in json.dumps(provider)
    flt = resources(provider, "AWS::Logs::MetricFilter")[alarm["DependsOn"]]["Properties"]
    assert flt["FilterPattern"] == '{ $.event = "deadletter.arrived" }'
    assert flt["MetricTransformations"][0]["MetricName"] == "DeadLetterArrivals"
    assert (props["ComparisonOperator"], props["Threshold"], props["TreatMissingData"]) == (
        "GreaterThanThreshold",
        0,
        "notBreaching",
    )


def test_liveness_alarm_fires_when_nobody_polls(provider: dict[str, Any]) -> None:
    alarm = resources(provider, "AWS::CloudWatch::Alarm")["NoConsumerAlarm"]["Properties"]
    expression, inputs = _math(alarm)
    assert inputs == {
        "empty": ("NumberOfEmptyReceives", "Queue", "Sum"),
        "received": ("NumberOfMessagesReceived", "Queue", "Sum"),
    }
    assert expression == "FILL(empty, 0) + FILL(received, 0)"
    periods = {m["MetricStat"]["Period"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert periods == {300} and alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == 2
    # not on a fresh create: the alarm exists only once the group has signalled (its daemons polled)
    assert resources(provider, "AWS::CloudWatch::Alarm")["NoConsumerAlarm"]["DependsOn"] == "AutoScalingGroup"
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("LessThanThreshold", 1)
    assert alarm["TreatMissingData"] == "breaching"  # no metrics at all: nobody is polling


def test_oldest_message_alarm(provider: dict[str, Any]) -> None:
    age = resources(provider, "AWS::CloudWatch::Alarm")["OldestMessageAlarm"]["Properties"]
    assert (age["MetricName"], age["Namespace"]) == ("ApproximateAgeOfOldestMessage", "AWS/SQS")
    assert age["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["Queue", "QueueName"]}}]
    assert age["ComparisonOperator"] == "GreaterThanThreshold"
    assert age["Threshold"] == {"Ref": "OldestMessageAgeThreshold"}
    assert provider["Parameters"]["OldestMessageAgeThreshold"]["Default"] == 300


def test_outputs_export_the_service_token(provider: dict[str, Any]) -> None:
    outputs = provider["Outputs"]
    assert outputs["ServiceToken"]["Value"] == {"Ref": "Topic"}
    assert outputs["ServiceToken"]["Export"]["Name"] == {"Fn::Sub": "${AWS::StackName}-ServiceToken"}
    assert outputs["QueueUrl"]["Value"] == {"Ref": "Queue"}
    assert outputs["DeadLetterQueueUrl"]["Value"] == {"Ref": "DeadLetterQueue"}
    assert outputs["TableName"]["Value"] == {"Ref": "StateTable"}
    assert outputs["LogGroupName"]["Value"] == {"Ref": "LogGroup"}


# ---------------------------------------------------------------------------------------- consumer
RESERVED = ("ServiceToken", "ServiceTimeout", "Name", "FailWith")  # handlers/echo.py does not echo these


def test_consumer_uses_custom_echo_through_the_providers_service_token(
    consumer: dict[str, Any], provider: dict[str, Any]
) -> None:
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
