"""Scenario 9: what running a `lambda:` function in an execution environment of its own costs.

Measured in the bench process itself, the way the worker calls a handler (cfn_provider.pipeline.runner.call
with the request's context), so the figures are the call's own cost, without SQS, S3 or the store:

- cold start: from spawning a function's process to its module loaded and ready (a trivial
  function, and one that imports boto3 and makes a client, as most do), median of `cold_n`;
- per call, warm: a plain sync handler in the daemon's thread pool (the in-process path plain
  handlers take, and the one the old in-process `lambda:` adapter took, answering through a
  substituted cfnresponse without any HTTP) against the same work as a `lambda:` function
  answering through AWS-style cfnresponse (a PUT over HTTPS to the loopback listener), and one
  answering through a single kept-open connection (the floor of the channel itself); median and
  p95 of `calls_n` sequential calls, and the overhead (median isolated - median in process);
- the resident memory of a warm process (trivial, boto3);
- the same cold start and warm per-call cost of an `fc:` function (Alibaba Function Compute's:
  the event as bytes, `json.loads`, an urllib POST with a Date header to its ResponseURL, as
  Alibaba's samples answer ROS), beside the `lambda:` trivial function's.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

TRIVIAL = """
import cfnresponse
def handler(event, context):
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Size": "1"}, "bench-1")
"""
BOTO3 = """
import boto3, cfnresponse
s3 = boto3.client("s3", region_name="us-east-1")
def handler(event, context):
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Size": "1"}, "bench-1")
"""
KEPT_OPEN = """
import http.client, json, ssl, urllib.parse
connections = {}
def handler(event, context):
    url = urllib.parse.urlsplit(event["ResponseURL"])
    conn = connections.get(url.netloc)
    if conn is None:
        conn = connections[url.netloc] = http.client.HTTPSConnection(url.netloc, context=ssl.create_default_context())
    body = json.dumps({"Status": "SUCCESS", "PhysicalResourceId": "bench-1", "Data": {"Size": "1"}})
    conn.request("PUT", url.path + "?" + url.query, body=body, headers={"content-type": ""})
    conn.getresponse().read()
"""

FC_TRIVIAL = """
import json, time
from urllib.request import Request, urlopen
def handler(event, context):
    event = json.loads(event)
    body = {"Status": "SUCCESS", "PhysicalResourceId": "bench-1", "Data": {"Size": "1"}}
    headers = {"Content-type": "application/json", "Date": time.strftime("%a, %d %b %Y %X GMT", time.gmtime())}
    urlopen(Request(event["ResponseURL"], data=json.dumps(body).encode(), headers=headers), timeout=20).read()
"""


class InProcess:
    """The same answer from a plain sync handler (the daemon's thread pool)."""

    @staticmethod
    def create(event: Any) -> dict[str, Any]:
        return {"PhysicalResourceId": "bench-1", "Data": {"Size": "1"}}

    update = delete = create


def _event() -> str:
    return json.dumps(
        {
            "RequestType": "Create",
            "ResponseURL": "https://cloudformation-custom-resource-response-useast1."
            "s3.us-east-1.amazonaws.com/k?X-Amz-Signature=x",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/bench/1",
            "RequestId": str(uuid.uuid4()),
            "LogicalResourceId": "L",
            "ResourceType": "Custom::Bench",
            "ResourceProperties": {},
        }
    )


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000,
    }


async def _calls(handler: Any, n: int, executor: ThreadPoolExecutor) -> dict[str, float]:
    from cfn_provider.pipeline import response as responses
    from cfn_provider.pipeline.request import parse
    from cfn_provider.pipeline.runner import Context, call

    samples = []
    for _ in range(n):
        request = parse(_event())
        started = time.perf_counter()
        result = await call(handler, request, Context(request, time.monotonic() + 30), executor)
        if not responses.success(request, result).ok:
            raise RuntimeError(f"the bench function did not answer SUCCESS: {result!r}")
        samples.append(time.perf_counter() - started)
    return _quantiles(samples)


def _rss_mb(pid: int) -> float:
    from .harness import memory_kib

    return memory_kib(pid)["VmRSS"] / 1024


async def _measure(folder: Path, cold_n: int, calls_n: int) -> dict[str, Any]:
    from cfn_provider.functions.fc_target import load as load_fc
    from cfn_provider.functions.host import FunctionHost
    from cfn_provider.functions.settings import FunctionSettings
    from cfn_provider.functions.target import load

    functions = {}
    for name, source in (("trivial", TRIVIAL), ("boto3", BOTO3), ("kept_open", KEPT_OPEN), ("fc", FC_TRIVIAL)):
        (folder / name).mkdir()
        (folder / name / "index.py").write_text(textwrap.dedent(source))
        loader = load_fc if name == "fc" else load
        target = f"{'fc' if name == 'fc' else 'lambda'}:index.handler"
        functions[name] = loader(target, f"Custom::{name}", FunctionSettings(code=str(folder / name)))
    out: dict[str, Any] = {"cold_n": cold_n, "calls_n": calls_n}
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="handler")
    async with FunctionHost() as host:
        for name in ("trivial", "boto3", "fc"):
            samples, rss = [], []
            for _ in range(cold_n):
                started = time.perf_counter()
                process = await functions[name].spawn(host)
                samples.append(time.perf_counter() - started)
                assert process.proc is not None
                rss.append(_rss_mb(process.proc.pid))
                await process.close()
            out[f"cold_{name}"] = _quantiles(samples)
            out[f"rss_{name}_mb"] = statistics.median(rss)
        out["in_process"] = await _calls(InProcess(), calls_n, executor)
        for name in ("trivial", "kept_open", "fc"):
            await host.warm([functions[name]])
            await _calls(functions[name], 3, executor)  # warm: the interpreter's first HTTPS set-up is not a call's
            out[f"isolated_{name}"] = await _calls(functions[name], calls_n, executor)
    executor.shutdown(wait=True)
    out["overhead_ms"] = out["isolated_trivial"]["p50_ms"] - out["in_process"]["p50_ms"]
    out["overhead_kept_open_ms"] = out["isolated_kept_open"]["p50_ms"] - out["in_process"]["p50_ms"]
    out["overhead_fc_ms"] = out["isolated_fc"]["p50_ms"] - out["in_process"]["p50_ms"]
    return out


def isolation(opts: Any) -> dict[str, Any]:
    """The figures of the module docstring (`opts`: bench.scenarios.Options; --quick: fewer)."""
    quick = opts.slow_m < 500
    from structlog.testing import capture_logs

    with tempfile.TemporaryDirectory(prefix="cfn-bench-functions-") as folder, capture_logs():  # not on the table
        out = asyncio.run(_measure(Path(folder), 5 if quick else 15, 100 if quick else 400))
    opts.say(
        f"    lambda: cold start {out['cold_trivial']['p50_ms']:.0f} ms (boto3: {out['cold_boto3']['p50_ms']:.0f} ms); "
        f"per call {out['in_process']['p50_ms']:.2f} ms in process, {out['isolated_trivial']['p50_ms']:.2f} ms "
        f"isolated ({out['isolated_kept_open']['p50_ms']:.2f} ms on a kept-open connection)"
    )
    opts.say(
        f"    fc: cold start {out['cold_fc']['p50_ms']:.0f} ms; per call {out['isolated_fc']['p50_ms']:.2f} ms "
        f"(urllib POST with a Date header, as Alibaba's samples answer ROS)"
    )
    return out
