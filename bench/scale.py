"""Scenario 6, scale-out: 1, 2 and 3 daemon processes sharing one fleet-mode DynamoDB table, in
moto's DynamoDB and in dynalite (an independent implementation, tests/support/dynalite.py), with
SQS/SNS/S3 in moto as everywhere else."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

from .harness import REPO, EmulatorProcess, child_env, cpu_seconds
from .scenarios import Options, throughput_run


def fleet_mode(timeout: float = 60.0) -> tuple[bool, str]:
    """Is `--state dynamodb://...` implemented? True once open_store('dynamodb://x') no longer
    raises "not available". Asked in a child process with AWS pointed at a closed loopback
    port, so whatever open_store does, it reaches no real AWS."""
    probe = (
        "import asyncio, inspect\n"
        "from cfn_provider.stores import open_store\n"
        "try:\n"
        "    store = open_store('dynamodb://x')\n"
        "except Exception as exc:\n"
        "    print('RAISED', exc)\n"
        "else:\n"
        "    close = getattr(store, 'close', None)\n"
        "    try:\n"
        "        result = close() if close else None\n"
        "        if inspect.isawaitable(result): asyncio.run(result)\n"
        "    except Exception: pass\n"
        "    print('OPENED')\n"
    )
    env = child_env(
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing-secret-key-not-real",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return False, "open_store('dynamodb://x') did not return"
    line = (done.stdout.strip().splitlines() or ["RAISED no answer: " + done.stderr.strip()[-200:]])[-1]
    if line.startswith("RAISED") and "not available" in line:
        return False, line[len("RAISED ") :]
    return True, ""


def fleet_state_url(em: EmulatorProcess) -> str:
    """A fresh fleet-mode table in the emulator, made as `cfn-provider bootstrap` makes it."""
    table = f"cfn-bench-{uuid.uuid4().hex[:8]}"
    client = em.client("dynamodb")
    try:
        from cfn_provider.ops.bootstrap import ensure_table
    except ImportError:  # bootstrap not there: the schema daemon/stores/dynamodb.py reads
        client.create_table(
            TableName=table,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        )
    else:
        ensure_table(client, table)
    return f"dynamodb://{table}"


def scale_out(
    opts: Options,
    state: Callable[[EmulatorProcess], str] = fleet_state_url,
    label: str = "dynamodb (moto)",
    tag: str = "scale",
) -> dict[str, Any]:
    available, why = fleet_mode()
    out: dict[str, Any] = {"requests": opts.scale_n, "fleet_mode": available, "fleet_note": "" if available else why}
    counts = (1, 2, 3) if available else (1,)
    base = None
    for processes in counts:
        try:
            run = throughput_run(
                opts,
                "daemon",
                opts.scale_n,
                f"{tag}-{processes}",
                processes=processes,
                state=state if available else None,
            )
        except RuntimeError as exc:  # e.g. fleet mode present but not startable here
            out[str(processes)] = {"error": str(exc)}
            continue
        base = base or run["rps"]
        run["ratio_to_one"] = run["rps"] / base
        out[str(processes)] = run
    out["state"] = label if available else "sqlite (fleet mode not available yet)"
    return out


def scale_out_dynalite(opts: Options) -> dict[str, Any]:
    """scale_out with the fleet table in dynalite; n/a (with the reason) when dynalite is not installed
    (`make test` installs it; see tests/support/dynalite.py)."""
    try:
        from tests.support.dynalite import Dynalite, DynaliteMissing
    except ImportError as exc:  # the bench runs from the repository, where tests/ is
        return {"requests": opts.scale_n, "unavailable": f"tests.support.dynalite: {exc}"}
    rundir = opts.logdir / "scale-dynalite"
    rundir.mkdir(parents=True, exist_ok=True)
    try:
        db = Dynalite(rundir / "dynalite.log").start()
    except DynaliteMissing as exc:
        return {"requests": opts.scale_n, "unavailable": str(exc)}
    try:

        def table(_em: EmulatorProcess) -> str:
            name = f"cfn-bench-{uuid.uuid4().hex[:8]}"
            db.create_table(name)
            return f"dynamodb://{name}"

        on_dynalite = dataclasses.replace(
            opts, daemon_env={**opts.daemon_env, "AWS_ENDPOINT_URL_DYNAMODB": db.endpoint}
        )
        cpu0 = cpu_seconds(db.proc.pid)  # type: ignore[union-attr]
        out = scale_out(on_dynalite, table, "dynamodb (dynalite)", "scale-dynalite")
        answered = sum(r.get("answered", 0) for r in out.values() if isinstance(r, dict))
        out["dynalite_cpu_ms_per_request"] = 1000 * (cpu_seconds(db.proc.pid) - cpu0) / max(answered, 1)  # type: ignore[union-attr]
        return out
    finally:
        db.stop()
