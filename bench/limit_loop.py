"""The practical limit: the least an asyncio consumer can do per request.

Each poller: receive up to 10 -> PUT every response concurrently -> delete the batch. No
signature check, no idempotency store, no logging framework; only the JSON parsing a
response needs. Prints `ready`, then `answered K` after each batch (the bench counts them).

    python -m bench.limit_loop --queue-url URL [--pollers 1] [--wait-seconds 20] [--max-seconds 600]
                               [--event-loop asyncio|uvloop|auto]
    python -m bench.limit_loop --queue-url URL --receive-only   # latency baseline: prints
                                        # `received SNS_MESSAGE_ID UNIX_TIME` and deletes, no PUT
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from typing import Any

import aiobotocore.session
import aiohttp
from yarl import URL

from cfn_provider import loops


def response_body(request: dict) -> bytes:
    return json.dumps(
        {
            "Status": "SUCCESS",
            "PhysicalResourceId": f"{request['LogicalResourceId']}-{request['RequestId'][:8]}",
            "StackId": request["StackId"],
            "RequestId": request["RequestId"],
            "LogicalResourceId": request["LogicalResourceId"],
        }
    ).encode()


class Batches:
    """The queue calls of the bench's loops (this one and the durable floor): a receive of up to 10,
    and the delete of what it brought in one call. Methods, so bench.profile tells the stages apart."""

    def __init__(self, sqs: Any, args: argparse.Namespace) -> None:
        self.sqs, self.queue_url, self.wait_seconds = sqs, args.queue_url, args.wait_seconds

    async def receive(self) -> list[dict]:
        resp = await self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=self.wait_seconds
        )
        return resp.get("Messages", [])

    async def delete(self, messages: list[dict]) -> None:
        await self.sqs.delete_message_batch(
            QueueUrl=self.queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
        )


async def serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    give_up = time.monotonic() + args.max_seconds
    session = aiobotocore.session.get_session()
    async with session.create_client("sqs") as sqs, aiohttp.ClientSession() as http:
        batches = Batches(sqs, args)

        async def answer(message: dict) -> None:
            request = json.loads(json.loads(message["Body"])["Message"])
            async with http.put(
                URL(request["ResponseURL"], encoded=True), data=response_body(request), headers={"Content-Type": ""}
            ) as resp:
                await resp.read()
                if resp.status != 200:
                    print(f"error PUT {resp.status}", flush=True)

        async def poll() -> None:
            while not stop.is_set() and time.monotonic() < give_up:
                messages = await batches.receive()
                if not messages:
                    continue
                if args.receive_only:
                    now = time.time()
                    for m in messages:
                        print(f"received {json.loads(m['Body'])['MessageId']} {now:.6f}", flush=True)
                else:
                    await asyncio.gather(*(answer(m) for m in messages))
                await batches.delete(messages)
                if not args.receive_only:
                    print(f"answered {len(messages)}", flush=True)

        print("ready", flush=True)
        pollers = [asyncio.create_task(poll()) for _ in range(args.pollers)]
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({stopper, *pollers}, timeout=args.max_seconds, return_when=asyncio.FIRST_COMPLETED)
        for task in (stopper, *pollers):
            task.cancel()
        await asyncio.gather(stopper, *pollers, return_exceptions=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--pollers", type=int, default=1)
    parser.add_argument("--wait-seconds", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=600)
    parser.add_argument("--receive-only", action="store_true")
    parser.add_argument("--event-loop", choices=loops.CHOICES, default="asyncio", help="default asyncio")
    args = parser.parse_args()
    return loops.run(lambda: serve(args), args.event_loop)


if __name__ == "__main__":
    sys.exit(main())
