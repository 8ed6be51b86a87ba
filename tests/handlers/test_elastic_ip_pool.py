"""cfn_provider.handlers.elastic_ip_pool (Custom::ElasticIpPool) through the real queue, EC2 on the moto server."""

from __future__ import annotations

import json

import pytest

from cfn_provider.handlers import elastic_ip_pool as eip
from cfn_provider.handlers.elastic_ip_pool import ElasticIpPool, handler
from cfn_provider.local.emulator import Stack
from cfn_provider.pipeline.request import parse
from tests.support.aws import response_of
from tests.support.daemons import TEST_HANDLERS

T = "Custom::ElasticIpPool"
NAMED = (*TEST_HANDLERS, (T, None))  # the built-in, named as an operator would


@pytest.fixture
def ec2(provider):
    return provider.emulator.client("ec2")


def pool_addresses(ec2, pool: str) -> dict[int, dict]:
    found = ec2.describe_addresses(Filters=[{"Name": f"tag:{eip.POOL_TAG}", "Values": [pool]}])["Addresses"]
    out = {}
    for address in found:
        tags = {t["Key"]: t["Value"] for t in address.get("Tags", [])}
        out[int(tags[eip.INDEX_TAG])] = {**address, "TagMap": tags}
    return out


async def answer(stack, req):
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp is not None
    return resp


def assert_data_matches(data: dict, members: dict[int, dict]) -> None:
    ips = [members[i]["PublicIp"] for i in sorted(members)]
    ids = [members[i]["AllocationId"] for i in sorted(members)]
    assert data["Addresses"] == ",".join(ips) and data["AllocationIds"] == ",".join(ids)
    assert data["Count"] == str(len(ips))
    for i, (ip, allocation) in enumerate(zip(ips, ids, strict=True)):
        assert data[f"Address{i}"] == ip and data[f"AllocationId{i}"] == allocation
    assert f"Address{len(ips)}" not in data


async def test_create_grow_shrink_retag_replace_delete(run_daemon, stack, ec2):
    await run_daemon(handlers=NAMED)
    props = {"Size": "3", "Tags": [{"Key": "team", "Value": "payments"}]}
    create = stack.request("Create", "Egress", T, props)
    resp = await answer(stack, create)
    assert resp["Status"] == "SUCCESS", resp
    pool = resp["PhysicalResourceId"]
    assert pool.startswith(f"{stack.name}-Egress-")
    members = pool_addresses(ec2, pool)
    assert sorted(members) == [0, 1, 2]
    assert_data_matches(resp["Data"], members)
    tags = members[0]["TagMap"]
    assert tags[eip.STACK_TAG] == stack.stack_id and tags[eip.LOGICAL_TAG] == "Egress" and tags["team"] == "payments"
    first_three = [members[i]["PublicIp"] for i in range(3)]

    grown = {"Size": "5", "Tags": [{"Key": "team", "Value": "payments"}]}
    resp = await answer(stack, stack.request("Update", "Egress", T, grown, old_properties=props, physical_id=pool))
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == pool
    members = pool_addresses(ec2, pool)
    assert sorted(members) == [0, 1, 2, 3, 4]
    assert [members[i]["PublicIp"] for i in range(3)] == first_three  # growing keeps the first ones
    assert_data_matches(resp["Data"], members)

    shrunk = {"Size": "2", "Tags": [{"Key": "owner", "Value": "ops"}]}
    resp = await answer(stack, stack.request("Update", "Egress", T, shrunk, old_properties=grown, physical_id=pool))
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == pool
    members = pool_addresses(ec2, pool)
    assert sorted(members) == [0, 1] and [members[i]["PublicIp"] for i in range(2)] == first_three[:2]
    assert members[0]["TagMap"].get("owner") == "ops" and "team" not in members[0]["TagMap"]
    assert_data_matches(resp["Data"], members)
    assert not ec2.describe_addresses(Filters=[{"Name": "public-ip", "Values": [first_three[2]]}])["Addresses"]

    replaced = {**shrunk, "NetworkBorderGroup": "us-east-1"}
    resp = await answer(stack, stack.request("Update", "Egress", T, replaced, old_properties=shrunk, physical_id=pool))
    assert resp["Status"] == "SUCCESS"
    new_pool = resp["PhysicalResourceId"]
    assert new_pool != pool and sorted(pool_addresses(ec2, new_pool)) == [0, 1]
    assert len(pool_addresses(ec2, pool)) == 2  # the old pool stays until CloudFormation deletes it

    resp = await answer(stack, stack.request("Delete", "Egress", T, shrunk, physical_id=pool))
    assert resp["Status"] == "SUCCESS" and pool_addresses(ec2, pool) == {}
    assert len(pool_addresses(ec2, new_pool)) == 2
    resp = await answer(stack, stack.request("Delete", "Egress", T, replaced, physical_id=new_pool))
    assert resp["Status"] == "SUCCESS" and pool_addresses(ec2, new_pool) == {}


async def test_addresses_released_elsewhere_are_tolerated(run_daemon, stack, ec2):
    await run_daemon(handlers=NAMED)
    props = {"Size": "3"}
    resp = await answer(stack, stack.request("Create", "Pool", T, props))
    pool = resp["PhysicalResourceId"]
    members = pool_addresses(ec2, pool)
    ec2.release_address(AllocationId=members[1]["AllocationId"])  # behind the provider's back

    same = {"Size": "3", "ServiceTimeout": "300"}
    resp = await answer(stack, stack.request("Update", "Pool", T, same, old_properties=props, physical_id=pool))
    assert resp["Status"] == "SUCCESS"
    after = pool_addresses(ec2, pool)
    assert sorted(after) == [0, 1, 2]
    assert (
        after[0]["AllocationId"] == members[0]["AllocationId"]
        and after[2]["AllocationId"] == members[2]["AllocationId"]
    )
    assert after[1]["AllocationId"] != members[1]["AllocationId"]  # the gap was filled
    assert_data_matches(resp["Data"], after)

    ec2.release_address(AllocationId=after[0]["AllocationId"])
    resp = await answer(stack, stack.request("Delete", "Pool", T, props, physical_id=pool))
    assert resp["Status"] == "SUCCESS" and pool_addresses(ec2, pool) == {}
    resp = await answer(stack, stack.request("Delete", "Pool", T, props, physical_id=pool))
    assert resp["Status"] == "SUCCESS"  # nothing left: still fine


async def test_a_repeated_create_adopts_what_an_earlier_attempt_allocated(stack, ec2):
    """The pool id comes from the RequestId, so the same Create run again (an attempt that died after
    allocating, or CloudFormation's retry after a FAILED) finds the addresses and reuses them."""
    first = stack.request("Create", "Pool", T, {"Size": "2"})
    result = await handler.create(parse(json.dumps(first)).wire, None)
    pool = result["PhysicalResourceId"]
    adopted = pool_addresses(ec2, pool)
    assert sorted(adopted) == [0, 1]

    again = {**first, "ResourceProperties": {**first["ResourceProperties"], "Size": "3"}}
    result = await handler.create(parse(json.dumps(again)).wire, None)
    assert result["PhysicalResourceId"] == pool
    members = pool_addresses(ec2, pool)
    assert sorted(members) == [0, 1, 2]
    assert [members[i]["AllocationId"] for i in (0, 1)] == [adopted[i]["AllocationId"] for i in (0, 1)]
    assert_data_matches(result["Data"], members)

    await handler.delete(parse(json.dumps({**first, "RequestType": "Delete", "PhysicalResourceId": pool})).wire, None)
    assert pool_addresses(ec2, pool) == {}


async def test_failure_modes(run_daemon, stack, ec2):
    await run_daemon(handlers=NAMED)
    reqs = {
        "big": stack.request("Create", "A", T, {"Size": "21"}),
        "nan": stack.request("Create", "B", T, {"Size": "three"}),
        "missing": stack.request("Create", "C", T, {}),
        "reserved": stack.request(
            "Create", "D", T, {"Size": "1", "Tags": [{"Key": "cfn-provider:pool", "Value": "x"}]}
        ),
        "badtag": stack.request("Create", "E", T, {"Size": "1", "Tags": [{"Key": "k"}]}),
    }
    for req in reqs.values():
        stack.publish(req)
    got = {k: await response_of(stack, r) for k, r in reqs.items()}
    assert all(r["Status"] == "FAILED" for r in got.values()), got
    assert got["big"]["Reason"] == "invalid ResourceProperties: Size: must be at most 20 (maximum)"
    assert got["nan"]["Reason"] == "invalid ResourceProperties: Size: must be of type integer (type)"
    assert got["missing"]["Reason"] == "invalid ResourceProperties: Size: is required (required)"
    assert "are reserved (Tags[0].Key)" in got["reserved"]["Reason"]
    assert got["badtag"]["Reason"] == "invalid ResourceProperties: Tags[0].Value: is required (required)"
    tagged = ec2.describe_addresses(Filters=[{"Name": f"tag:{eip.STACK_TAG}", "Values": [stack.stack_id]}])["Addresses"]
    assert tagged == []  # nothing allocated, nothing left behind


async def test_a_failed_create_releases_what_it_allocated(stack, ec2, monkeypatch):
    """CloudFormation sends no Delete after a failed Create: the handler cleans up itself."""
    calls = {"n": 0}
    real = ElasticIpPool._allocate

    async def flaky(ec2_client, pool, index, props, wanted, call):
        calls["n"] += 1
        if calls["n"] == 3:
            raise eip.PoolError("could not allocate Elastic IP 3 of 4: AddressLimitExceeded")
        return await real(ec2_client, pool, index, props, wanted, call)

    monkeypatch.setattr(ElasticIpPool, "_allocate", staticmethod(flaky))
    req = stack.request("Create", "Flaky", T, {"Size": "4"})
    with pytest.raises(eip.PoolError, match="AddressLimitExceeded"):
        await handler.create(parse(json.dumps(req)).wire, None)
    tagged = ec2.describe_addresses(
        Filters=[
            {"Name": f"tag:{eip.LOGICAL_TAG}", "Values": ["Flaky"]},
            {"Name": f"tag:{eip.STACK_TAG}", "Values": [stack.stack_id]},
        ]
    )
    assert tagged["Addresses"] == []


def test_data_stays_well_inside_the_response_limit():
    addresses = [{"PublicIp": "203.0.113.255", "AllocationId": "eipalloc-0123456789abcdef0"}] * eip.MAX_SIZE
    assert len(json.dumps(eip.data_of(addresses))) < 3000


async def test_another_stacks_pool_id_reaches_none_of_its_addresses(run_daemon, provider, ec2):
    """A template can hand the provider any PhysicalResourceId (e.g. one another ServiceToken
    answered): naming the victim's pool must not read, retag, shrink or release it."""
    victim, attacker = Stack(provider, name="prod"), Stack(provider, name="tenant")
    await run_daemon(handlers=NAMED)
    made = await answer(victim, victim.request("Create", "Egress", T, {"Size": "2"}))
    pool = made["PhysicalResourceId"]
    before = {i: (a["PublicIp"], a["TagMap"]) for i, a in pool_addresses(ec2, pool).items()}

    shrink = attacker.request(
        "Update",
        "Egress",
        T,
        {"Size": "0", "Tags": [{"Key": "owner", "Value": "me"}]},
        old_properties={"Size": "2"},
        physical_id=pool,
    )
    resp = await answer(attacker, shrink)
    assert made["Data"]["Address0"] not in json.dumps(resp)  # nothing of the victim's comes back
    resp = await answer(attacker, attacker.request("Delete", "Egress", T, {"Size": "2"}, physical_id=pool))
    assert resp["Status"] == "SUCCESS"
    after = {i: (a["PublicIp"], a["TagMap"]) for i, a in pool_addresses(ec2, pool).items()}
    assert after == before  # all there, tags untouched
