"""deploy/provider.yaml's subnets: two Availability Zones are a rule CloudFormation checks, not a
description (issue 30, item 8).

The template's own Rules section is run by a small evaluator of CloudFormation's rule functions
(tests/support/cfn_rules.py) against parameter values and a fake account's subnets: SubnetIdA
and SubnetIdB in one zone, in another VPC, or DesiredCapacity 1 stop the stack before anything is
created. The Auto Scaling group's VPCZoneIdentifier is resolved by simulate's template code
(cfn_provider.local.template) under the same values: SubnetIdA, SubnetIdB and MoreSubnetIds'
subnets, never an empty subnet id from MoreSubnetIds' default. docs/operating.md's deploy and
update commands pass the parameters the template has.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from cfn_provider.local.template import Template
from tests.deploy.test_templates import PROVIDER, REPO, load, only
from tests.support.cfn_rules import Failure, RejectedParameters, Subnet, Unsupported, failed_assertions

SUBNETS = {
    "subnet-0a1": Subnet("eu-west-1a", "vpc-0main"),
    "subnet-0a2": Subnet("eu-west-1a", "vpc-0main"),
    "subnet-0b1": Subnet("eu-west-1b", "vpc-0main"),
    "subnet-0c1": Subnet("eu-west-1c", "vpc-0main"),
    "subnet-0c2": Subnet("eu-west-1c", "vpc-0main"),
    "subnet-0x1": Subnet("eu-west-1b", "vpc-0other"),
}
# What an operator passes: the required parameters, the rest left at their defaults
GOOD = {
    "VpcId": "vpc-0main",
    "SubnetIdA": "subnet-0a1",
    "SubnetIdB": "subnet-0b1",
    "PackageSpec": "cfn-sns-provider==0.2.0",
    "ReleaseSha256": "0" * 64,
    "WheelhouseBucket": "releases",
    "AlarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:ops-alarms",
}


@pytest.fixture(scope="module")
def provider() -> dict[str, Any]:
    return load(PROVIDER)


def failures(provider: dict[str, Any], **changes: str) -> list[Failure]:
    return failed_assertions(provider, {**GOOD, **changes}, SUBNETS)


def zone_identifier(provider: dict[str, Any], **changes: str) -> list[str]:
    """The group's VPCZoneIdentifier as CloudFormation would resolve it under these values."""
    name, _ = only(provider, "AWS::AutoScaling::AutoScalingGroup")
    template = Template(provider, {**GOOD, **changes})
    value = provider["Resources"][name]["Properties"]["VPCZoneIdentifier"]
    resolved: list[str] = template.resolve(value, lambda _: None, f"{name}.VPCZoneIdentifier")
    return resolved


# ---------------------------------------------------------------------------------------- the rules
def test_two_subnets_in_two_zones_of_the_vpc_pass_every_rule(provider: dict[str, Any]) -> None:
    assert failures(provider) == []
    assert failures(provider, SubnetIdA="subnet-0c1", SubnetIdB="subnet-0a2") == []


@pytest.mark.parametrize(
    "a, b", [("subnet-0a1", "subnet-0a2"), ("subnet-0c2", "subnet-0c1"), ("subnet-0b1", "subnet-0b1")]
)
def test_two_subnets_in_one_zone_stop_the_stack(provider: dict[str, Any], a: str, b: str) -> None:
    """Two subnets of one zone (or one subnet twice): one zone's outage would stop every instance."""
    [failure] = failures(provider, SubnetIdA=a, SubnetIdB=b)
    assert failure.rule == "TwoAvailabilityZones"
    assert "same Availability Zone" in failure.description and "give SubnetIdB" in failure.description


@pytest.mark.parametrize("which", ["SubnetIdA", "SubnetIdB"])
def test_a_subnet_of_another_vpc_stops_the_stack(provider: dict[str, Any], which: str) -> None:
    """subnet-0x1 is in eu-west-1b of another VPC: the zones differ from subnet-0a1's, the VPC does not match."""
    other = "subnet-0a1" if which == "SubnetIdB" else "subnet-0c1"
    found = failures(provider, **{which: "subnet-0x1", ("SubnetIdA" if which == "SubnetIdB" else "SubnetIdB"): other})
    assert [f.rule for f in found] == ["SubnetsInTheVpc"]
    assert "subnets of VpcId" in found[0].description
    # the other way round: the subnets agree with each other, VpcId names another VPC
    assert [f.rule for f in failures(provider, VpcId="vpc-0other")] == ["SubnetsInTheVpc"]


def test_one_instance_stops_the_stack(provider: dict[str, Any]) -> None:
    [failure] = failures(provider, DesiredCapacity="1")
    assert failure.rule == "TwoOrMoreInstances" and "2 or more" in failure.description
    assert failures(provider, DesiredCapacity="2") == [] and failures(provider, DesiredCapacity="3") == []
    assert provider["Parameters"]["DesiredCapacity"]["MinValue"] >= 2


def test_a_subnet_id_that_does_not_exist_is_refused_before_the_rules(provider: dict[str, Any]) -> None:
    """As CloudFormation checks an AWS::EC2::Subnet::Id value exists: the evaluator needs every subnet."""
    with pytest.raises(RejectedParameters, match="SubnetIdB"):
        failures(provider, SubnetIdB="subnet-0nope")


def test_the_evaluator_refuses_what_it_does_not_model(provider: dict[str, Any]) -> None:
    """A template that starts using another rule function fails its tests instead of passing unchecked."""
    for assertion in (
        {"Fn::Contains": [{"Fn::RefAll": "AWS::EC2::VPC::Id"}, {"Ref": "VpcId"}]},
        {"Fn::Equals": [{"Fn::ValueOf": ["SubnetIdA", "Tags.Name"]}, "x"]},
        {"Fn::Equals": [{"Fn::ValueOf": ["VpcId", "DefaultSecurityGroup"]}, "x"]},
        {"Fn::If": ["HasMoreSubnets", True, False]},
    ):
        changed = {**provider, "Rules": {"Probe": {"Assertions": [{"Assert": assertion}]}}}
        with pytest.raises(Unsupported):
            failed_assertions(changed, GOOD, SUBNETS)


# ---------------------------------------------------------------------------------------- more subnets
@pytest.mark.parametrize(
    "more, refused_by",
    [
        ("", None),  # the default: [""]
        (",", None),  # only empty members: as the default, nothing added
        ("subnet-0c1", None),
        (" subnet-0c1 , subnet-0x9 ", None),  # members are space-trimmed; not checked for existence
        ("subnet-0c1,", "empty entry"),
        (",subnet-0c1", "empty entry"),
        ("subnet-0c1,,subnet-0c2", "empty entry"),
        ("subnet-0a1", "lists SubnetIdA again"),
        ("subnet-0c1,subnet-0b1", "lists SubnetIdB again"),
    ],
)
def test_more_subnet_ids_add_subnets_and_never_an_empty_one(
    provider: dict[str, Any], more: str, refused_by: str | None
) -> None:
    found = failures(provider, MoreSubnetIds=more)
    if refused_by:
        assert [f.rule for f in found] == ["MoreSubnetIdsAreFurtherSubnets"]
        assert refused_by in found[0].description
        return
    assert found == []
    zones = zone_identifier(provider, MoreSubnetIds=more)
    listed = [m.strip() for m in more.split(",") if m.strip()]
    assert zones == ["subnet-0a1", "subnet-0b1", *listed]
    assert "" not in zones and len(set(zones)) == len(zones)


def test_the_group_spans_subnet_a_and_b_by_default(provider: dict[str, Any]) -> None:
    assert zone_identifier(provider) == ["subnet-0a1", "subnet-0b1"]
    params = provider["Parameters"]
    assert params["SubnetIdA"]["Type"] == params["SubnetIdB"]["Type"] == "AWS::EC2::Subnet::Id"
    assert "Default" not in params["SubnetIdA"] and "Default" not in params["SubnetIdB"]
    assert params["MoreSubnetIds"] == {**params["MoreSubnetIds"], "Type": "CommaDelimitedList", "Default": ""}
    assert "VpcSubnetIds" not in params
    [network] = [
        g
        for g in provider["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
        if g["Label"]["default"] == "Network"
    ]
    assert network["Parameters"] == ["VpcId", "SubnetIdA", "SubnetIdB", "MoreSubnetIds"]


# ---------------------------------------------------------------------------------------- the documented commands
def test_the_documented_commands_pass_the_templates_parameters(provider: dict[str, Any]) -> None:
    """docs/operating.md's deploy command gives every parameter without a default, and every
    command names only parameters the template has (no VpcSubnetIds left behind)."""
    params = provider["Parameters"]
    doc = (REPO / "docs" / "operating.md").read_text()
    deploy = doc.split("### Deploy on AWS with CloudFormation", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    command = deploy.split("--template-file deploy/provider.yaml", 1)[1].split("\naws ", 1)[0]
    overrides = re.findall(r"(?:^|\s)(\w+)=", command.split("--parameter-overrides", 1)[1])
    assert {name for name, spec in params.items() if "Default" not in spec} <= set(overrides)
    keys = re.findall(r"ParameterKey=(\w+),", doc)
    assert {"SubnetIdA", "SubnetIdB", "MoreSubnetIds"} <= set(keys)
    assert set(overrides) | set(keys) <= set(params)
    upgrade = doc.split("### Upgrading from a template with VpcSubnetIds", 1)[1].split("\n### ", 1)[0]
    assert "ParameterKey=SubnetIdA,ParameterValue=" in upgrade and "ParameterKey=SubnetIdB,ParameterValue=" in upgrade
