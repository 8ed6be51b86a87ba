"""Fixtures for the tests that drive cfn_provider.transports.queue.SqsQueue directly (deletes, poller)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiobotocore.session
import pytest

from cfn_provider.local.emulator import Emulator, Provider
from cfn_provider.transports.queue import SqsQueue


@pytest.fixture
async def client(emulator: Emulator) -> AsyncIterator[Any]:
    """An aiobotocore SQS client on the suite's moto server (its calls observable through botocore events)."""
    async with aiobotocore.session.get_session().create_client("sqs", region_name="us-east-1") as sqs:
        yield sqs


@pytest.fixture
def queue(client: Any, provider: Provider) -> SqsQueue:
    return SqsQueue(client, provider.queue_url)
