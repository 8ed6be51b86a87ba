"""Scenario 9, the web listener (`run --transport web`): ROS requests over HTTPS, sync and async.

One daemon process (HTTPS with a certificate from a test CA, the trivial handler, SQLite state);
the load comes from this process over keep-alive HTTPS connections (aiohttp), `concurrency`
requests at a time, each with its own RequestId. A sync request is done when its response (the
answer) arrives; an async one when its answer reaches the ResponseURL, a small aiohttp server in
a process of its own standing in for ROS's (it notes when each answer came). Figures: requests a
second over the whole run, latency p50 / p99 (sync: the round trip; async: the 200's round trip
and the time until the answer arrived), the daemon's CPU per request; then the same one request
at a time, for the latency of a lone request.

    python -m bench --only web [--quick]
"""
from __future__ import annotations

import asyncio
import json
import multiprocessing
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


def _receiver(conn: Any) -> None:
    """The ROS response endpoint, in its own process: POST /ans/<RequestId> -> 200; reports arrivals."""
    arrivals: dict[str, float] = {}

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        arrivals.setdefault(request.match_info["rid"], time.time())
        return web.Response(status=200)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/ans/{rid}", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        conn.send(runner.addresses[0][1])
        loop = asyncio.get_running_loop()
        while True:
            command = await loop.run_in_executor(None, conn.recv)
            if command == "stop":
                break
            conn.send(dict(arrivals))
        await runner.cleanup()

    asyncio.run(main())


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "count": 0}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return {"p50_ms": pick(0.50), "p99_ms": pick(0.99), "mean_ms": statistics.fmean(ordered) * 1000,
            "count": len(ordered)}


def _request(response_base: str) -> dict[str, Any]:
    rid = str(uuid.uuid4()).upper()
    return {"RequestType": "Create", "RequestId": rid, "ResponseURL": f"{response_base}/ans/{rid}",
            "IntranetResponseURL": f"{response_base}/ans/{rid}", "ResourceType": "Custom::Bench",
            "LogicalResourceId": "Thing", "StackId": str(uuid.uuid4()), "StackName": "bench",
            "ResourceOwnerId": "1", "CallerId": "1", "RegionId": "cn-hangzhou", "ResourceProperties": {}}


async def _load(session: aiohttp.ClientSession, url: str, requests: list[dict[str, Any]], concurrency: int
                ) -> tuple[list[float], dict[str, float], float]:
    """Send every request, `concurrency` at a time: (round trips, when each was sent, seconds)."""
    pending = list(reversed(requests))
    trips: list[float] = []
    sent: dict[str, float] = {}

    async def worker() -> None:
        while pending:
            req = pending.pop()
            sent[req["RequestId"]] = time.time()
            started = time.perf_counter()
            async with session.post(url, data=json.dumps(req).encode()) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {body[:200]!r}")
            trips.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return trips, sent, time.perf_counter() - started


async def _answers(conn: Any, sent: dict[str, float], timeout: float = 120.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        conn.send("arrivals")
        arrivals = await asyncio.to_thread(conn.recv)
        if all(rid in arrivals for rid in sent) or time.monotonic() > deadline:
            return arrivals
        await asyncio.sleep(0.05)


async def _run(base: str, token: str, ctx: Any, conn: Any, response_base: str, n: int, lone: int, pid: int
               ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    connector = aiohttp.TCPConnector(ssl=ctx, limit=LOADED_CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        await _load(session, f"{base}/{token}/sync", [_request(response_base) for _ in range(20)], 4)  # warm up
        for mode, concurrency, count in (("sync", LOADED_CONCURRENCY, n), ("async", LOADED_CONCURRENCY, n),
                                         ("sync_lone", 1, lone), ("async_lone", 1, lone)):
            url = f"{base}/{token}" + ("/sync" if mode.startswith("sync") else "")
            requests = [_request(response_base) for _ in range(count)]
            cpu0 = cpu_seconds(pid)
            started = time.time()
            trips, sent, seconds = await _load(session, url, requests, concurrency)
            run: dict[str, Any] = {"requests": count, "concurrency": concurrency, "round_trip": _quantiles(trips)}
            if mode.startswith("async"):
                arrivals = await _answers(conn, sent)
                answered = [arrivals[r] - sent[r] for r in sent if r in arrivals]
                run["answer"] = _quantiles(answered)
                run["answered"] = len(answered)
                seconds = max(arrivals.get(r, started) for r in sent) - started
            run["seconds"], run["rps"] = seconds, count / seconds if seconds else float("nan")
            run["cpu_ms_per_request"] = (cpu_seconds(pid) - cpu0) * 1000 / count
            run["verified"] = len(trips) == count and run.get("answered", count) == count
            out[mode] = run
    return out


def run_web(opts: Any) -> dict[str, Any]:
    """Scenario 9; `opts` is bench.scenarios.Options (its logdir, concurrency, event_loop; quick sizes
    when opts.latency_count is the quick one)."""
    sys.path.insert(0, str(REPO))
    from cfn_provider.trust.web_tokens import new_token
    from tests.support.tls import CertAuthority

    n = 600 if opts.latency_count < 100 else 3000
    lone = 50 if opts.latency_count < 100 else 200
    work = Path(tempfile.mkdtemp(prefix="web-", dir=opts.logdir))
    ca = CertAuthority(work)
    cert, key = ca.issue(work / "server")
    token = new_token()
    (work / "token").write_text(token + "\n")
    parent, child = multiprocessing.Pipe()
    receiver = multiprocessing.Process(target=_receiver, args=(child,), daemon=True)
    receiver.start()
    response_base = f"http://127.0.0.1:{parent.recv()}"
    log = open(work / "daemon.log", "w")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "cfn_provider", "run", "--transport", "web", "--web-address", "127.0.0.1",
         "--web-port", "0", "--web-cert", str(cert), "--web-key", str(key), "--web-token-file", str(work / "token"),
         "--state", f"sqlite://{work}/state.db", "--handler", "Custom::Bench=bench.handlers:trivial",
         "--allow-response-url", response_base + "/", "--concurrency", str(opts.concurrency),
         "--event-loop", opts.event_loop, "--log-format", "json"],
        env={**os.environ, "PYTHONPATH": str(REPO), "STATE_DIRECTORY": str(work)}, stdout=log,
        stderr=subprocess.STDOUT, cwd=REPO)
    try:
        base = _listening(work / "daemon.log", daemon)
        result = asyncio.run(_run(base, token, ca.client_context(), parent, response_base, n, lone, daemon.pid))
    finally:
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
        parent.send("stop")
        receiver.join(10)
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
