"""A stack's owner record in the DynamoDB store (cfn_provider.stores.base: `own_stack`).

One UpdateItem on the item `owner_key(StackId)`, condition: absent. It has no TTL attribute (it
never expires) and no `expires_at` (the operator's listing never shows it as a record); on a
failed condition the owner is read from what stood in the way (ALL_OLD), or read consistently
where the endpoint does not return it.
"""

from __future__ import annotations

from typing import Any

from .base import owner_key
from .dynamodb_items import KEY_ATTRIBUTE
from .dynamodb_items import number as _n


async def own_stack(store: Any, stack_id: str, principal: str) -> str:
    """The owner of `stack_id` in `store` (a DynamoDBStore): `principal` when no principal owned it."""
    key = {KEY_ATTRIBUTE: {"S": owner_key(stack_id)}}
    ok, resp = await store._conditional(
        "update_item",
        Key=key,
        UpdateExpression="SET #principal = :principal, #since = :now",
        ConditionExpression="attribute_not_exists(#pk)",
        ExpressionAttributeNames={"#pk": KEY_ATTRIBUTE, "#principal": "principal", "#since": "owned_since"},
        ExpressionAttributeValues={":principal": {"S": principal}, ":now": _n(store.clock())},
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )
    if ok:
        return principal
    item = resp.get("Item") or (await store._call("get_item", Key=key, ConsistentRead=True)).get("Item") or {}
    return str(item.get("principal", {}).get("S", ""))
