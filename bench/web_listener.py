"""Scenario 9, the web listener (`run --transport web`): ROS requests over HTTPS, sync and async.

One daemon process (HTTPS with a certificate from a test CA, the trivial handler, SQLite state);
the load comes from this process over keep-alive HTTPS connections (aiohttp), `concurrency`
requests in flight at a time (closed loop), each with its own RequestId. A sync request is done
when its response (the answer) arrives; an async one when its answer reaches the ResponseURL, a
small aiohttp server on this process's loop standing in for ROS's. Figures: requests a second over
the whole run, latency p50 / p99 (sync: the round trip; async: the 200's round trip, and from
sending the request to its answer's arrival), the daemon's CPU per request; then the same one
request at a time, for the latency of a lone request.

    python -m bench --only web [--quick]
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from .harness import REPO, cpu_seconds

LOADED_CONCURRENCY = 16


class Receiver:
    """The ROS response endpoint: POST /ans/<RequestId> -> 200; wakes whoever waits for that answer."""

    def __init__(self) -> None:
        self.arrived: dict[str, asyncio.Event] = {}
        self.runner: web.AppRunner | None = None
        self.base = ""

    def expect(self, rid: str) -> asyncio.Event:
        return self.arrived.setdefault(rid, asyncio.Event())

    async def _answer(self, request: web.Request) -> web.Response:
        await request.read()
        self.expect(request.match_info["rid"]).set()
        return web.Response(status=200)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/ans/{rid}", self._answer)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.base = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "count": 0}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return {
        "p50_ms": pick(0.50),
        "p99_ms": pick(0.99),
        "mean_ms": statistics.fmean(ordered) * 1000,
        "count": len(ordered),
    }


def _request(response_base: str) -> dict[str, Any]:
    rid = str(uuid.uuid4()).upper()
    return {
        "RequestType": "Create",
        "RequestId": rid,
        "ResponseURL": f"{response_base}/ans/{rid}",
        "IntranetResponseURL": f"{response_base}/ans/{rid}",
        "ResourceType": "Custom::Bench",
        "LogicalResourceId": "Thing",
        "StackId": str(uuid.uuid4()),
        "StackName": "bench",
        "ResourceOwnerId": "1",
        "CallerId": "1",
        "RegionId": "cn-hangzhou",
        "ResourceProperties": {},
    }


async def _load(
    session: aiohttp.ClientSession,
    url: str,
    requests: list[dict[str, Any]],
    concurrency: int,
    receiver: Receiver | None,
) -> tuple[list[float], list[float], float]:
    """Every request, `concurrency` in flight at a time, each until answered (with `receiver`: until its
    answer reached the ResponseURL): (round trips, times to the answer, seconds)."""
    pending = list(reversed(requests))
    trips: list[float] = []
    answers: list[float] = []

    async def worker() -> None:
        while pending:
            req = pending.pop()
            arrived = receiver.expect(req["RequestId"]) if receiver else None
            started = time.perf_counter()
            async with session.post(url, data=json.dumps(req).encode()) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {body[:200]!r}")
            trips.append(time.perf_counter() - started)
            if arrived is not None:
                await asyncio.wait_for(arrived.wait(), 60)
            answers.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return trips, answers, time.perf_counter() - started


async def _run(work: Path, opts: Any, n: int, lone: int) -> dict[str, Any]:
    from cfn_provider.trust.web_tokens import new_token
    from tests.support.tls import CertAuthority

    ca = CertAuthority(work)
    cert, key = ca.issue(work / "server")
    token = new_token()
    (work / "token").write_text(token + "\n")
    receiver = Receiver()
    await receiver.start()
    log = open(work / "daemon.log", "w")
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cfn_provider",
            "run",
            "--transport",
            "web",
            "--web-address",
            "127.0.0.1",
            "--web-port",
            "0",
            "--web-cert",
            str(cert),
            "--web-key",
            str(key),
            "--web-token-file",
            str(work / "token"),
            "--state",
            f"sqlite://{work}/state.db",
            "--handler",
            "Custom::Bench=bench.handlers:trivial",
            "--allow-response-url",
            receiver.base + "/",
            "--concurrency",
            str(opts.concurrency),
            "--event-loop",
            opts.event_loop,
            "--log-format",
            "json",
        ],
        env={**os.environ, "PYTHONPATH": str(REPO), "STATE_DIRECTORY": str(work)},
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    out: dict[str, Any] = {}
    try:
        base = await asyncio.to_thread(_listening, work / "daemon.log", daemon)
        connector = aiohttp.TCPConnector(ssl=ca.client_context(), limit=LOADED_CONCURRENCY)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            warm = [_request(receiver.base) for _ in range(20)]
            await _load(session, f"{base}/{token}/sync", warm, 4, None)
            for mode, concurrency, count in (
                ("sync", LOADED_CONCURRENCY, n),
                ("async", LOADED_CONCURRENCY, n),
                ("sync_lone", 1, lone),
                ("async_lone", 1, lone),
            ):
                sync = mode.startswith("sync")
                url = f"{base}/{token}" + ("/sync" if sync else "")
                requests = [_request(receiver.base) for _ in range(count)]
                cpu0 = cpu_seconds(daemon.pid)
                trips, answers, seconds = await _load(session, url, requests, concurrency, None if sync else receiver)
                out[mode] = {
                    "requests": count,
                    "concurrency": concurrency,
                    "round_trip": _quantiles(trips),
                    "answer": _quantiles(answers),
                    "seconds": seconds,
                    "rps": count / seconds,
                    "cpu_ms_per_request": (cpu_seconds(daemon.pid) - cpu0) * 1000 / count,
                    "verified": len(answers) == count,
                }
    finally:
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
        await receiver.stop()
    return out


def run_web(opts: Any) -> dict[str, Any]:
    """Scenario 9; `opts` is bench.scenarios.Options (its logdir, concurrency, event_loop; quick sizes
    when opts.latency_count is the quick one)."""
    sys.path.insert(0, str(REPO))
    n = 600 if opts.latency_count < 100 else 3000
    lone = 50 if opts.latency_count < 100 else 200
    work = Path(tempfile.mkdtemp(prefix="web-", dir=opts.logdir))
    result = asyncio.run(_run(work, opts, n, lone))
    result.update(handler="trivial (sync, thread pool)", tls="HTTPS, keep-alive", logs=str(work))
    return result


def _listening(log_path: Path, daemon: subprocess.Popen, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log_path.read_text().splitlines():
            if '"web.listening"' in line:
                return str(json.loads(line)["url"])
        if daemon.poll() is not None:
            raise RuntimeError(f"the daemon exited: {log_path.read_text()[-2000:]}")
        time.sleep(0.05)
    raise RuntimeError("the daemon did not start listening")
