"""The rows of scenario 11 (bench.fleet_cost) in `make bench`'s table: counts per request against the
minimum, dollars per million requests, a member's idle cost per month, and a Lambda-backed resource."""

from __future__ import annotations

import math
from typing import Any

from . import prices

Row = tuple[str, str, str, str]  # scenario, figure, value, target (bench.report.Row's first four)

_COUNTS = (  # figure, label, unit
    ("sqs_receive", "SQS ReceiveMessage", "calls"),
    ("sqs_delete", "SQS DeleteMessage(Batch)", "calls"),
    ("sqs_visibility", "SQS ChangeMessageVisibility", "calls"),
    ("dynamodb_writes", "DynamoDB writes", "calls"),
    ("dynamodb_wru", "DynamoDB write request units", "WRU"),
    ("dynamodb_reads", "DynamoDB reads", "calls"),
    ("dynamodb_rru", "DynamoDB read request units", "RRU"),
    ("s3_put", "S3 PUT", "calls"),
    ("sns_cert_fetch", "SNS certificate fetches", "calls"),
)
_DOLLARS = (  # priced figure, label
    ("sqs_receive", "SQS receives"),
    ("sqs_delete", "SQS deletes"),
    ("sqs_visibility", "SQS visibility changes"),
    ("dynamodb_wru", "DynamoDB writes (WRU)"),
    ("dynamodb_rru", "DynamoDB reads (RRU)"),
    ("s3_put", "S3 PUT (CloudFormation's bucket pays)"),
)


def _n(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) else f"{x:,.{digits}f}"


def _sp(sp: dict[str, Any], digits: int = 2, money: bool = False) -> str:
    """ "median (min - max)" of a figure over the rounds."""
    m = "$" if money else ""
    return f"{m}{_n(sp['median'], digits)} ({m}{_n(sp['min'], digits)} - {m}{_n(sp['max'], digits)})"


def _never(x: float) -> str:
    return "never (a request costs more)" if math.isinf(x) else _n(x, 0)


def cost_rows(c: dict[str, Any] | None) -> list[Row]:
    if not c:
        return []
    s = f"11 fleet cost: {c['requests']} Creates x {c.get('rounds', 0)}, dynamodb (dynalite), {prices.REGION}"
    if "unavailable" in c:
        return [(s, "AWS calls per request", f"n/a: {c['unavailable'][:70]}", "")]
    flag = "" if c["verified"] else " (unverified: not every request answered)"
    out = [(s, "per request, median (min - max) over rounds", f"measured{flag}", "minimum")]
    for key, label, unit in _COUNTS:
        out.append((s, f"  {label}", f"{_sp(c['per_request'][key], 3)} {unit}", _n(c["minimum"][key], 1)))
    steps = " / ".join(_n(c["per_request"][f"wru_{k}"]["median"], 2) for k in ("claim", "save", "mark"))
    out.append((s, "  WRU of the claim / stored response / SENT mark", steps, "1 / 1 / 1"))
    out.append((s, "  messages per receive", _sp(c["per_request"]["messages_per_receive"], 1), "10"))
    out += _dollar_rows(c, s)
    return out + _idle_rows(c, s)


def _dollar_rows(c: dict[str, Any], s: str) -> list[Row]:
    mp = c["minimum_priced"]
    out = [(s, f"$ per million requests ({prices.REGION} list prices of {prices.READ_ON})", "measured", "minimum")]
    for key, label in _DOLLARS:
        out.append((s, f"  {label}", _sp(c["dollars_per_million"][key], 3, True), f"${_n(mp['dollars'][key], 3)}"))
    out.append(
        (s, "  on your bill (the daemon's calls)", _sp(c["billed_per_million"], 3, True), f"${_n(mp['billed'], 3)}")
    )
    out.append(
        (
            s,
            "  + CloudFormation's SNS publish ($0.50/M)",
            _sp(c["with_publish_per_million"], 3, True),
            f"${_n(mp['with_publish'], 3)}",
        )
    )
    out.append(
        (
            s,
            "  the same on the SQLite store (one host, no table)",
            _sp(c["sqlite_with_publish_per_million"], 3, True),
            "",
        )
    )
    fn = c["lambda"]
    a = fn["assumed"]
    out.append(
        (
            s,
            f"  Lambda instead ({int(a['memory_gb'] * 1024)} MB, {_n(a['seconds'], 1)} s, "
            f"{int(a['log_bytes'])} B of logs)",
            f"${_n(fn['total'], 3)} (requests ${_n(fn['dollars']['requests'], 2)}, duration "
            f"${_n(fn['dollars']['duration'], 2)}, logs ${_n(fn['dollars']['logs'], 2)})",
            "no idle cost",
        )
    )
    return out


def _idle_rows(c: dict[str, Any], s: str) -> list[Row]:
    return [
        (s, "idle member, per month", "measured", "long polls only"),
        (s, "  SQS receives", _sp(c["idle_sqs_per_month"], 0), _n(c["long_poll_floor_per_month"], 0)),
        (s, "  DynamoDB calls per minute (due-poll look)", _sp(c["idle_dynamodb_calls_per_minute"], 1), "0"),
        (s, "  DynamoDB read request units", _sp(c["idle_rru_per_month"], 0), "0"),
        (
            s,
            "  $ per member per month",
            _sp(c["idle_dollars_per_month"], 3, True),
            f"${_n(c['idle_floor_dollars_per_month'], 3)}",
        ),
        (
            s,
            "  requests/month to beat Lambda: DynamoDB / SQLite store",
            f"{_never(c['break_even_requests_per_month'])} / {_never(c['sqlite_break_even_requests_per_month'])}",
            "idle cost / saving per request",
        ),
    ]
