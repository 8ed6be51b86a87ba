"""The tenancy step: a request may name only a stack its own principal owns (cfn_provider.trust.tenants).

    admitted request (its principal set by the transport) -> the stack's owner, written by the first
        principal to name it (one conditional write, cfn_provider.stores.base `own_stack`)
        -> the same principal: on to the claim; another one: Forged, nothing run, nothing answered

A principal's records are apart from every other's by their keys already (a key names its
principal: cfn_provider.pipeline.request.idempotency_key), so nothing another principal stored can
be replayed to it. This step refuses outright what would otherwise run a handler on another
principal's stack (a fresh RequestId with a victim's StackId, LogicalResourceId and
PhysicalResourceId): the web listener answers 403, a queue's message is not answered and goes to
the dead-letter queue as any other Forged one (docs/security.md). An owner never changes, so this
daemon remembers the owners it has seen (the last `CACHED`).
"""

from __future__ import annotations

from collections import OrderedDict

from ..errors import Forged
from .request import Request
from .store_calls import StoreCalls

CACHED = 10_000  # stacks whose owner this daemon remembers


class Tenancy:
    """The step, with the worker's store calls. `enabled` False (a queue transport whose topics all
    belong to the default principal): every request is the default principal's, nothing to check."""

    def __init__(self, calls: StoreCalls, enabled: bool = True) -> None:
        self.calls, self.enabled = calls, enabled
        self._owners: OrderedDict[str, str] = OrderedDict()

    async def admit(self, request: Request) -> None:
        """Nothing when `request`'s principal owns its stack (or now does); Forged when another one does."""
        if not self.enabled:
            return
        stack, principal = request.stack_id, request.principal
        owner = self._owners.get(stack)
        if owner is None:
            owner = await self.calls.call(lambda: self.calls.store.own_stack(stack, principal))
            self._owners[stack] = owner
            if len(self._owners) > CACHED:
                self._owners.popitem(last=False)
        if owner != principal:
            raise Forged(
                f"the StackId belongs to another principal than this request's ({principal}): a request may "
                "name only its own principal's stacks (docs/security.md)"
            )
