"""The AWS region and credentials `run` needs, found or refused before anything starts.

The region: `--region` (CFN_PROVIDER_REGION, the config file), else botocore's own (AWS_REGION,
AWS_DEFAULT_REGION, the profile), else the one the queue URL names
(`https://sqs.eu-west-1.amazonaws.com/...`), else the first topic ARN's. With none, and something
that needs one (the SQS transport, a DynamoDB store), `run` stops at once: `cfn-provider: <why>`,
exit 2, instead of botocore's NoRegionError traceback. Credentials are looked up the way botocore
looks them up; none at all is refused the same way (otherwise every receive fails, for ever).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from .errors import StartupError

_REGION = r"[a-z]{2}(?:-[a-z]+)+-\d+"
# sqs.REGION.amazonaws.com[.cn], sqs.REGION.api.aws, and the legacy REGION.queue.amazonaws.com
_QUEUE_HOSTS = (
    re.compile(rf"^sqs\.({_REGION})\.(?:amazonaws\.com(?:\.cn)?|api\.aws)$"),
    re.compile(rf"^({_REGION})\.queue\.amazonaws\.com(?:\.cn)?$"),
)
_ARN = re.compile(rf"^arn:aws[a-z-]*:sns:({_REGION}):")


class AwsStartError(StartupError):
    """`run` has no AWS region or no credentials for what it must call."""


def region_of_queue_url(url: str | None) -> str | None:
    """The region an SQS queue URL names in its host, if it names one (an emulator's does not)."""
    host = (urlsplit(url or "").hostname or "").lower()
    for pattern in _QUEUE_HOSTS:
        if match := pattern.match(host):
            return match.group(1)
    return None


def region_of_topic_arn(arn: str | None) -> str | None:
    match = _ARN.match(arn or "")
    return match.group(1) if match else None


def configured_region() -> str | None:
    """The environment's region: AWS_REGION, else botocore's own (AWS_DEFAULT_REGION, the profile's)."""
    import os

    import botocore.session

    region = os.environ.get("AWS_REGION") or botocore.session.Session().get_config_variable("region")
    return str(region) if region else None


def resolve_region(given: str | None, queue_url: str | None, topic_arns: tuple[str, ...] | list[str]) -> str | None:
    """The region `run` uses (the module docstring's order); None when nothing names one."""
    return (
        given
        or configured_region()
        or region_of_queue_url(queue_url)
        or next(filter(None, map(region_of_topic_arn, topic_arns)), None)
    )


def needs_aws(transport: str, state: str) -> bool:
    """Whether `run` calls AWS at all: the SQS transport, or a DynamoDB store (fleet mode)."""
    return transport == "sqs" or state.startswith("dynamodb://")


def check(region: str | None, transport: str, state: str) -> None:
    """`run`: refuse a start without a region or without credentials, when it calls AWS."""
    if needs_aws(transport, state):  # Settings made in code (the demo, simulate) leave the region to botocore
        require(region or configured_region(), "the SQS queue" if transport == "sqs" else "the DynamoDB store")


def require(region: str | None, what: str) -> None:
    """Refuse a command that calls AWS for `what` (e.g. "the SQS queue") without a region or credentials."""
    if not region:
        from_url = ", or a queue URL that names it (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)"
        raise AwsStartError(f"no AWS region for {what}: give --region or AWS_REGION{from_url if 'SQS' in what else ''}")
    import botocore.session

    if botocore.session.Session().get_credentials() is None:
        raise AwsStartError(
            f"no AWS credentials for {what}: none in the environment (AWS_ACCESS_KEY_ID, AWS_PROFILE), "
            "the shared files (~/.aws), the container or the instance role"
        )
