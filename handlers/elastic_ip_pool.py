"""Custom::ElasticIpPool: a pool of N Elastic IPs for the stack (e.g. to give partners a
white-list that survives instance and NAT replacements).

    EgressIps:
      Type: Custom::ElasticIpPool
      Properties:
        ServiceToken: !Ref ProviderTopicArn
        Size: 3                                  # 0..20; change it to grow or shrink the pool in place
        Tags:                                    # optional, on every address (changeable in place)
          - Key: team
            Value: payments
        # PublicIpv4Pool: ipv4pool-ec2-...       # optional (BYOIP); changing it replaces the pool
        # NetworkBorderGroup: us-west-2-lax-1    # optional; changing it replaces the pool
    Outputs:
      Whitelist:
        Value: !GetAtt EgressIps.Addresses       # "203.0.113.10,203.0.113.11,203.0.113.12"
      First:
        Value: !GetAtt EgressIps.Address0        # also AllocationIds, AllocationId0, ..., Count

Addresses are allocated in the stack's region (from the StackId) with the provider's AWS
credentials (ec2:AllocateAddress, ec2:DescribeAddresses, ec2:CreateTags, ec2:DeleteTags,
ec2:ReleaseAddress). Each is tagged cfn-provider:pool (the PhysicalResourceId),
cfn-provider:index (its place in the pool), cfn-provider:stack-id and cfn-provider:logical-id.

The pool is reconciled from those tags, so every action is safe to repeat: addresses already
tagged for the pool are adopted (an earlier attempt's, or the pool's own on Update); a missing
index is allocated; indexes past Size are released (shrinking drops the last ones, so the
first addresses never change); addresses released behind the provider's back are tolerated
(Update allocates a replacement at that index, Delete has nothing to do for them). A Create
that fails releases what it allocated, since CloudFormation will not send a Delete for it.

Only addresses this resource made are ever read, retagged or released: members of a pool are
the addresses whose tags name its id, its stack and its logical id (a template can send any
PhysicalResourceId; it cannot send another stack's StackId).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from cfn_provider import Call, Resource
from cfn_provider.errors import HandlerFailure

POOL_TAG = "cfn-provider:pool"
INDEX_TAG = "cfn-provider:index"
STACK_TAG = "cfn-provider:stack-id"
LOGICAL_TAG = "cfn-provider:logical-id"
RESERVED_PREFIXES = ("cfn-provider:", "aws:")
MAX_SIZE = 20  # keeps Data (addresses and allocation ids, joined and by index) well inside 4096 bytes
CLEANUP_SECONDS = 10.0
_GONE = ("InvalidAllocationID.NotFound", "InvalidAddress.NotFound", "InvalidAddressID.NotFound")


class PoolError(HandlerFailure, RuntimeError):
    reason_is_message = True  # the Reason is the message alone (cfn_provider.pipeline.raised)


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _tags(address: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in address.get("Tags") or []}


def _index(address: dict[str, Any]) -> int | None:
    value = _tags(address).get(INDEX_TAG, "")
    return int(value) if value.isdigit() else None


def data_of(addresses: list[dict[str, Any]]) -> dict[str, str]:
    ips = [a["PublicIp"] for a in addresses]
    ids = [a["AllocationId"] for a in addresses]
    data = {"Addresses": ",".join(ips), "AllocationIds": ",".join(ids), "Count": str(len(ips))}
    for i, (ip, allocation) in enumerate(zip(ips, ids, strict=True)):
        data[f"Address{i}"] = ip
        data[f"AllocationId{i}"] = allocation
    return data


class ElasticIpPool(Resource):
    schema = {
        "type": "object",
        "properties": {
            "Size": {"type": "integer", "minimum": 0, "maximum": MAX_SIZE},
            "Tags": {
                "type": "array",
                "maxItems": 40,
                "items": {
                    "type": "object",
                    "properties": {
                        "Key": {"type": "string", "minLength": 1, "maxLength": 128},
                        "Value": {"type": "string", "maxLength": 256},
                    },
                    "required": ["Key", "Value"],
                    "additionalProperties": False,
                },
            },
            "PublicIpv4Pool": {"type": "string", "minLength": 1},
            "NetworkBorderGroup": {"type": "string", "minLength": 1},
        },
        "required": ["Size"],
        "additionalProperties": False,
    }
    replace_on = ("PublicIpv4Pool", "NetworkBorderGroup")

    async def create(self, props: dict[str, Any], call: Call) -> dict[str, Any]:
        pool = call.new_physical_id()  # from the RequestId: a repeated attempt adopts what an earlier one made
        async with call.client("ec2") as ec2:
            try:
                addresses = await self._reconcile(ec2, pool, props, call)
            except BaseException:
                # A failed Create gets no Delete from CloudFormation: do not leave addresses behind.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._release_all(ec2, pool, call, strict=False), CLEANUP_SECONDS)
                raise
        return {"PhysicalResourceId": pool, "Data": data_of(addresses)}

    async def update(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> dict[str, Any]:
        pool = call.physical_id or ""
        async with call.client("ec2") as ec2:
            addresses = await self._reconcile(ec2, pool, props, call)
        return {"Data": data_of(addresses)}

    async def delete(self, props: dict[str, Any], call: Call) -> None:
        if call.physical_id:
            async with call.client("ec2") as ec2:
                await self._release_all(ec2, call.physical_id, call, strict=True)

    # --------------------------------------------------------------------------------
    @staticmethod
    async def _members(ec2: Any, pool: str, call: Call) -> list[dict[str, Any]]:
        """The pool's addresses: tagged with its id *and* made for this stack and logical id. The id
        alone is not proof: a template can hand this provider any PhysicalResourceId (e.g. one a
        previous ServiceToken answered), and must not reach another stack's addresses with it."""
        found = await ec2.describe_addresses(Filters=[{"Name": f"tag:{POOL_TAG}", "Values": [pool]}])
        mine = [
            a
            for a in found.get("Addresses", [])
            if _tags(a).get(STACK_TAG) == call.stack_id[:256] and _tags(a).get(LOGICAL_TAG) == call.logical_id
        ]
        return sorted(mine, key=lambda a: (_index(a) is None, _index(a) or 0, a["AllocationId"]))

    async def _reconcile(self, ec2: Any, pool: str, props: dict[str, Any], call: Call) -> list[dict[str, Any]]:
        size = props["Size"]
        tags = props.get("Tags") or []
        wanted = {t["Key"]: t["Value"] for t in tags}
        reserved = [f"Tags[{i}].Key" for i, t in enumerate(tags) if t["Key"].lower().startswith(RESERVED_PREFIXES)]
        if reserved:
            raise PoolError(f"Tags: keys starting with cfn-provider: or aws: are reserved ({', '.join(reserved)})")

        slots: dict[int, dict[str, Any]] = {}
        surplus: list[dict[str, Any]] = []
        for address in await self._members(ec2, pool, call):
            index = _index(address)
            if index is not None and index < size and index not in slots:
                slots[index] = address
            else:
                surplus.append(address)
        for address in surplus:  # shrink (and any duplicate or untagged-index stragglers)
            await self._release(ec2, address, call, strict=True)

        for index in range(size):
            if index in slots:
                await self._retag(ec2, slots[index], wanted)
            else:
                slots[index] = await self._allocate(ec2, pool, index, props, wanted, call)
        call.log.info("elastic_ip_pool.reconciled", pool=pool, size=size, released=len(surplus))
        return [slots[i] for i in range(size)]

    @staticmethod
    async def _allocate(
        ec2: Any, pool: str, index: int, props: dict[str, Any], wanted: dict[str, str], call: Call
    ) -> dict[str, Any]:
        tags = {
            POOL_TAG: pool,
            INDEX_TAG: str(index),
            STACK_TAG: call.stack_id[:256],
            LOGICAL_TAG: call.logical_id,
            **wanted,
        }
        args: dict[str, Any] = {
            "Domain": "vpc",
            "TagSpecifications": [
                {"ResourceType": "elastic-ip", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        }
        for name in ("PublicIpv4Pool", "NetworkBorderGroup"):
            if props.get(name):
                args[name] = props[name]
        try:
            allocated = await ec2.allocate_address(**args)
        except Exception as exc:
            if _code(exc):  # the code, not EC2's message: that may quote PublicIpv4Pool / NetworkBorderGroup
                raise PoolError(
                    f"could not allocate Elastic IP {index + 1} of {props['Size']}: EC2 said {_code(exc)}"
                ) from None
            raise
        return {
            "PublicIp": allocated["PublicIp"],
            "AllocationId": allocated["AllocationId"],
            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        }

    @staticmethod
    async def _retag(ec2: Any, address: dict[str, Any], wanted: dict[str, str]) -> None:
        current = {k: v for k, v in _tags(address).items() if not k.lower().startswith(RESERVED_PREFIXES)}
        stale = sorted(k for k in current if k not in wanted)
        changed = {k: v for k, v in wanted.items() if current.get(k) != v}
        if stale:
            await ec2.delete_tags(Resources=[address["AllocationId"]], Tags=[{"Key": k} for k in stale])
        if changed:
            await ec2.create_tags(
                Resources=[address["AllocationId"]], Tags=[{"Key": k, "Value": v} for k, v in changed.items()]
            )

    @staticmethod
    async def _release(ec2: Any, address: dict[str, Any], call: Call, strict: bool) -> None:
        try:
            await ec2.release_address(AllocationId=address["AllocationId"])
        except Exception as exc:
            code = _code(exc)
            if code in _GONE:
                return  # released already: that is what we wanted
            if strict or not code:
                raise PoolError(
                    f"could not release Elastic IP {address.get('PublicIp')} ({address['AllocationId']}): {exc}"
                ) from None
            call.log.warning("elastic_ip_pool.release_failed", allocation_id=address["AllocationId"], error=code)

    async def _release_all(self, ec2: Any, pool: str, call: Call, strict: bool) -> None:
        members = await self._members(ec2, pool, call)
        for address in members:
            await self._release(ec2, address, call, strict)
        call.log.info("elastic_ip_pool.released", pool=pool, count=len(members))


handler = ElasticIpPool.handler()
create, update, delete = handler.create, handler.update, handler.delete
