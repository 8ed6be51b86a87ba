"""MNS transport: cfn_provider.transports.mns (aiohttp) against aliyun-mns-sdk in a thread pool, on a local server.

    python -m bench.mns_transport [--messages 600] [--sdk-path DIR]

The SDK is not a dependency of the project: install it somewhere apart to include it
(`pip install --target /tmp/mns-sdk aliyun-mns-sdk==1.3.0`, then `--sdk-path /tmp/mns-sdk`).
tests/support/mns_server.py runs in a process of its own, so the consumer's CPU is its own.

Scenarios, each for: `raw` (cfn_provider.transports.mns.MnsQueue), `sdk-pool` (the SDK, one client per pool
thread: the fair way to use it) and `sdk-shared` (one SDK client behind a lock: the SDK's
documented usage of one Account/Queue object):
- drain: N messages, batch receive 16 (waitseconds 1), delete each: wall time, CPU per message;
- ops during a long poll: 20 visibility changes + deletes issued while a 5 s long poll is
  outstanding on the same queue object: median and max latency;
- stop: how long a 10 s long poll keeps running after it is cancelled 1 s in.
Results go to stdout and bench/mns_transport.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cfn_provider.transports.mns import Credentials, MnsQueue  # noqa: E402
from cfn_provider.transports.queue import Message  # noqa: E402
from tests.support.mns_server import MnsClient, MnsServer  # noqa: E402


def _serve(conn: Any) -> None:
    server = MnsServer().start()
    conn.send((server.endpoint, server.access_key_id, server.secret))
    conn.recv()  # until told to stop
    server.stop()


class _Remote:
    """Enough of MnsServer for MnsClient, for a server in another process."""

    def __init__(self, endpoint: str, key: str, secret: str):
        self.endpoint, self.access_key_id, self.secret, self.security_token = endpoint, key, secret, None


class SdkQueue:
    """cfn_provider.transports.queue.Queue over aliyun-mns-sdk in a thread pool (bodies as sent: no base64)."""

    max_batch = 16

    def __init__(self, endpoint: str, key: str, secret: str, queue: str, shared: bool, threads: int = 8):
        from mns.account import Account  # noqa: PLC0415 - optional, from --sdk-path

        self._make = lambda: Account(endpoint, key, secret).get_queue(queue)
        self.url, self.shared = f"{endpoint}/queues/{queue}", shared
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mns-sdk")
        self._local = threading.local()
        self._one = self._make() if shared else None
        self._lock = threading.Lock()

    def _queue(self) -> Any:
        if self.shared:
            return self._one
        if not hasattr(self._local, "q"):
            self._local.q = self._make()
            self._local.q.set_encoding(False)
        return self._local.q

    def _call(self, fn: Any) -> Any:
        def run() -> Any:
            q = self._queue()
            q.set_encoding(False)
            if self.shared:
                with self._lock:
                    return fn(q)
            return fn(q)

        return asyncio.get_running_loop().run_in_executor(self.pool, run)

    async def receive(self, max_messages: int, wait_seconds: int, visibility_timeout: int) -> list[Message]:
        from mns.mns_exception import MNSServerException  # noqa: PLC0415

        def go(q: Any) -> list[Any]:
            try:
                return q.batch_receive_message(max_messages, wait_seconds)
            except MNSServerException as exc:
                if exc.type == "MessageNotExist":
                    return []
                raise

        raw = await self._call(go)
        import datetime as dt  # noqa: PLC0415

        return [
            Message(
                m.message_id,
                m.message_body,
                m.receipt_handle,
                dt.datetime.fromtimestamp(m.enqueue_time / 1000, dt.UTC),
                m.dequeue_count,
            )
            for m in raw
        ]

    async def delete(self, message: Message) -> None:
        await self._call(lambda q: q.delete_message(message.receipt))

    async def set_visibility(self, message: Message, seconds: int) -> None:
        result = await self._call(lambda q: q.change_message_visibility(message.receipt, max(1, seconds)))
        message.receipt = result.receipt_handle

    async def has_dead_letter_queue(self) -> bool | None:
        return None


def cpu() -> float:
    t = os.times()
    return t.user + t.system


async def drain(queue: Any, total: int) -> dict[str, float]:
    started, cpu0, done = time.monotonic(), cpu(), 0
    while done < total:
        messages = await queue.receive(16, 1, 60)
        if not messages and time.monotonic() - started > 120:
            break
        await asyncio.gather(*(queue.delete(m) for m in messages))
        done += len(messages)
    wall, used = time.monotonic() - started, cpu() - cpu0
    return {
        "messages": done,
        "wall_s": round(wall, 3),
        "msg_per_s": round(done / wall, 1),
        "cpu_ms_per_msg": round(used * 1000 / max(done, 1), 3),
    }


async def ops_during_poll(queue: Any, client: MnsClient, name: str) -> dict[str, float]:
    for i in range(20):
        client.send_message(name, f'{{"op": {i}}}')
    held = []
    while len(held) < 20:
        held += await queue.receive(16, 1, 60)
    poll = asyncio.ensure_future(queue.receive(16, 5, 60))  # the queue is now empty: a full 5 s poll
    await asyncio.sleep(0.3)
    latencies = []

    async def timed(aw: Any) -> None:
        t = time.monotonic()
        await aw
        latencies.append(time.monotonic() - t)

    await asyncio.gather(*(timed(queue.set_visibility(m, 60)) for m in held))
    await asyncio.gather(*(timed(queue.delete(m)) for m in held))
    await poll
    return {
        "ops": len(latencies),
        "median_ms": round(statistics.median(latencies) * 1000, 1),
        "max_ms": round(max(latencies) * 1000, 1),
    }


async def stop_latency(queue: Any) -> dict[str, float]:
    poll = asyncio.ensure_future(queue.receive(16, 10, 60))
    await asyncio.sleep(1.0)
    cancelled_at = time.monotonic()
    poll.cancel()
    if isinstance(queue, SdkQueue):  # the thread goes on: wait for the pool to be idle again
        await asyncio.get_running_loop().run_in_executor(None, lambda: queue.pool.shutdown(wait=True))
    else:
        await asyncio.gather(poll, return_exceptions=True)
    return {"still_running_s": round(time.monotonic() - cancelled_at, 2)}


async def run_one(kind: str, remote: _Remote, total: int) -> dict[str, Any]:
    client = MnsClient(remote)  # type: ignore[arg-type]
    name = f"bench-{kind}-{os.getpid()}-{int(time.time())}"
    client.call("PUT", f"/queues/{name}", "<Queue><VisibilityTimeout>60</VisibilityTimeout></Queue>")
    body = '{"RequestType": "Create", "StackId": "' + "s" * 36 + '", "Padding": "' + "x" * 600 + '"}'
    for start in range(0, total, 16):
        batch = "".join(f"<Message><MessageBody>{body}</MessageBody></Message>" for _ in range(min(16, total - start)))
        status, _ = client.call("POST", f"/queues/{name}/messages", f"<Messages>{batch}</Messages>")
        assert status == 201
    async with AsyncExitStack() as stack:
        if kind == "raw":
            queue: Any = await MnsQueue.open(
                remote.endpoint, name, Credentials(remote.access_key_id, remote.secret), stack, allow_http=True
            )  # the local server is http
            await queue.has_dead_letter_queue()  # reads VisibilityTimeout: no per-message change needed
        else:
            queue = SdkQueue(remote.endpoint, remote.access_key_id, remote.secret, name, shared=kind == "sdk-shared")
        result = {
            "drain": await drain(queue, total),
            "ops_during_long_poll": await ops_during_poll(queue, client, name),
            "stop": await stop_latency(queue),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--sdk-path", help="where aliyun-mns-sdk is installed (pip install --target)")
    args = parser.parse_args()
    kinds = ["raw"]
    if args.sdk_path:
        sys.path.insert(0, args.sdk_path)
        kinds += ["sdk-pool", "sdk-shared"]
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_serve, args=(child,), daemon=True)
    proc.start()
    remote = _Remote(*parent.recv())
    results: dict[str, Any] = {}
    try:
        for kind in kinds:
            results[kind] = asyncio.run(run_one(kind, remote, args.messages))
    finally:
        parent.send("stop")
        proc.join(10)
    print(f"{'':12} {'msg/s':>8} {'cpu ms/msg':>11} {'op median':>10} {'op max':>9} {'after cancel':>13}")
    for kind in kinds:
        r = results[kind]
        print(
            f"{kind:12} {r['drain']['msg_per_s']:>8} {r['drain']['cpu_ms_per_msg']:>11} "
            f"{r['ops_during_long_poll']['median_ms']:>8}ms {r['ops_during_long_poll']['max_ms']:>7}ms "
            f"{r['stop']['still_running_s']:>11}s"
        )
    (REPO / "bench" / "mns_transport.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
