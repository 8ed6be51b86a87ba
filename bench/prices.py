"""AWS list prices (us-east-1) and the arithmetic that turns counted calls into dollars, for bench.fleet_cost.

Every figure here multiplies a count the bench measured (bench.fleet_cost: the real daemon against
moto and dynalite) by a published price; nothing is modelled except what is named as an assumption
(the Lambda comparison's duration and log volume, CloudFormation's own SNS publish). The prices,
their pages and the date they were read are in docs/performance.md ("What a fleet costs").

Free tiers are left out (they are per account, shared with everything else in it): these are the
prices past them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REGION = "us-east-1"
READ_ON = "2026-11-27"  # the day the prices below were read from the pages docs/performance.md names


@dataclass(frozen=True)
class Price:
    dollars: float  # per `per` units
    per: float
    unit: str

    def of(self, count: float) -> float:
        return count * self.dollars / self.per


PRICES = {
    "sqs_request": Price(0.40, 1e6, "SQS standard request (each 64 KB chunk of a payload)"),
    "dynamodb_wru": Price(0.625, 1e6, "DynamoDB on-demand write request unit"),
    "dynamodb_rru": Price(0.125, 1e6, "DynamoDB on-demand read request unit"),
    "s3_put": Price(0.005, 1e3, "S3 Standard PUT request"),
    "sns_publish": Price(0.50, 1e6, "SNS standard topic publish (64 KB chunk); deliveries to SQS: no charge"),
    "lambda_request": Price(0.20, 1e6, "Lambda request"),
    "lambda_gb_second": Price(0.0000166667, 1, "Lambda duration, x86, GB-second"),
    "logs_ingested_gb": Price(0.50, 1, "CloudWatch Logs ingestion, standard class, GB"),
}

SECONDS_PER_MONTH = 30 * 24 * 3600
LONG_POLL_SECONDS = 20  # the daemon's WaitTimeSeconds
LAMBDA_ASSUMED = {"memory_gb": 0.125, "seconds": 1.0, "log_bytes": 500}  # 128 MB, ~1 s, START/END/REPORT + a line

# What one request needs at the least, and why (docs/performance.md repeats this):
#   SQS: one ReceiveMessage brings up to 10 messages, one DeleteMessageBatch deletes a receive's batch;
#        no ChangeMessageVisibility for a handler that answers within the visibility timeout.
#   DynamoDB: 3 conditional writes of an item up to 1 KB (1 WRU each): the claim (before any side
#        effect, so one fleet member runs the handler), the stored response (before the PUT, so a
#        retry sends the same answer), the SENT mark (so a redelivery answers nothing twice); no read.
#   S3: the one PUT of the response. SNS certificates: none per request (fetched once, then cached).
MINIMUM = {
    "sqs_receive": 0.1,
    "sqs_delete": 0.1,
    "sqs_visibility": 0.0,
    "dynamodb_writes": 3.0,
    "dynamodb_wru": 3.0,
    "dynamodb_reads": 0.0,
    "dynamodb_rru": 0.0,
    "s3_put": 1.0,
    "sns_cert_fetch": 0.0,
}

# per request figure -> the price that bills it (None: free, counted only)
BILLED_BY = {
    "sqs_receive": "sqs_request",
    "sqs_delete": "sqs_request",
    "sqs_visibility": "sqs_request",
    "sqs_other": "sqs_request",
    "dynamodb_wru": "dynamodb_wru",
    "dynamodb_rru": "dynamodb_rru",
    "s3_put": "s3_put",
    "sns_cert_fetch": None,  # an HTTPS GET of a public certificate: not billed
}
NOT_BILLED_TO_YOU = ("s3_put",)  # the ResponseURL's bucket is CloudFormation's: its owner pays the PUT


def per_million(per_request: dict[str, float]) -> dict[str, float]:
    """Dollars per million requests, by billed figure, from counts per request."""
    return {
        key: PRICES[price].of(per_request.get(key, 0.0) * 1e6) for key, price in BILLED_BY.items() if price is not None
    }


def billed_total(dollars: dict[str, float]) -> float:
    """What your own bill shows: every priced row but those another account pays."""
    return sum(v for k, v in dollars.items() if k not in NOT_BILLED_TO_YOU)


def upstream_per_million() -> float:
    """CloudFormation's SNS publish to your topic, one per request (any SNS-backed provider pays it)."""
    return PRICES["sns_publish"].of(1e6)


def idle_per_month(per_second: dict[str, float]) -> dict[str, Any]:
    """One member's cost per 30-day month from call rates measured while idle: SQS requests (the long
    polls) and DynamoDB read/write units (the due-poll look, any heartbeat)."""
    month = {k: v * SECONDS_PER_MONTH for k, v in per_second.items()}
    dollars = {
        "sqs": PRICES["sqs_request"].of(month.get("sqs_requests", 0.0)),
        "dynamodb_rru": PRICES["dynamodb_rru"].of(month.get("dynamodb_rru", 0.0)),
        "dynamodb_wru": PRICES["dynamodb_wru"].of(month.get("dynamodb_wru", 0.0)),
    }
    return {"per_month": month, "dollars": dollars, "total": sum(dollars.values())}


def long_poll_floor_per_month(pollers: int = 1) -> float:
    """The receives one idle long poller makes in a month: one per WaitTimeSeconds (129,600 at 20 s)."""
    return pollers * SECONDS_PER_MONTH / LONG_POLL_SECONDS


def lambda_per_million(memory_gb: float, seconds: float, log_bytes: float) -> dict[str, float]:
    """A Lambda-backed custom resource per million requests: requests, GB-seconds, log ingestion."""
    return {
        "requests": PRICES["lambda_request"].of(1e6),
        "duration": PRICES["lambda_gb_second"].of(1e6 * memory_gb * seconds),
        "logs": PRICES["logs_ingested_gb"].of(1e6 * log_bytes / 1e9),
    }


def break_even_requests_per_month(idle_dollars: float, daemon_per_million: float, lambda_per_mil: float) -> float:
    """Requests per month above which a member's idle cost is paid back by its cheaper requests
    (inf when a request costs the daemon no less than the function)."""
    saving = (lambda_per_mil - daemon_per_million) / 1e6
    return float("inf") if saving <= 0 else idle_dollars / saving
