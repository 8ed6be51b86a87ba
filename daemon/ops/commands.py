"""The operator commands on the idempotency store: `cfn-provider requests` and `cfn-provider answer`
(click wiring; the work is in cfn_provider.ops.requests and cfn_provider.ops.answer)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..cli_options import (
    ALLOW_RESPONSE_URL_HELP,
    CONFIG_HELP,
    DLQ_URL_HELP,
    REGION_HELP,
    STATE_HELP,
    TRUST_SIGNING_CERT_URL_HELP,
    VERIFY_SIGNATURES_HELP,
    state_default,
)
from ..config import apply_config_file
from ..stores.base import POLLING, Record, url_digest
from .daemon_name import name_options, state_of
from .requests import STATES_HELP

if TYPE_CHECKING:
    from ..pipeline.request import Request
    from ..pipeline.response import Response, Status
    from ..transports.queue import Message

T = TypeVar("T")

ENV = "CFN_PROVIDER_"


def _daemon_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
    """--config: the daemon's TOML file, of which the settings this command also has are used."""
    if path:
        apply_config_file(ctx, path, strict=False)
    return path


config_option = click.option(
    "--config",
    type=click.Path(dir_okay=False),
    callback=_daemon_config,
    is_eager=True,
    expose_value=False,
    envvar=ENV + "CONFIG",
    help=CONFIG_HELP,
)
state_option = click.option(
    "--state",
    envvar=ENV + "STATE",
    show_default=state_default(),
    help=STATE_HELP,
)


def _region(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """--region, else AWS_REGION (botocore itself reads AWS_DEFAULT_REGION and the profile)."""
    return value or os.environ.get("AWS_REGION") or None


region_option = click.option("--region", envvar=ENV + "REGION", callback=_region, help=REGION_HELP)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)  # StoreConfigError, TableNotFound: start-up errors, exit 2 (cfn_provider.cli_errors)


@click.command("requests")
@config_option
@state_option
@name_options
@region_option
@click.option("--stack", help="Only this stack (its name or its StackId).")
@click.option("--logical-id", help="Only this LogicalResourceId.")
@click.option(
    "--state-is",
    "states",
    multiple=True,
    metavar="STATE",
    help=f"Only records in this state (repeatable; any case, or the word in brackets): {STATES_HELP}.",
)
@click.option(
    "--since",
    default="24h",
    show_default=True,
    metavar="DURATION",
    help="Only requests claimed within this window (90s, 30m, 24h, 2d; 0: everything stored).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def requests_command(
    state: str | None,
    region: str | None,
    stack: str | None,
    logical_id: str | None,
    states: tuple[str, ...],
    since: str,
    as_json: bool,
    **daemon: Any,
) -> None:
    """What the provider is doing right now, from its idempotency store: requests in flight (who
    holds them, lease left, age), answered but not yet confirmed sent (RESPONSE_READY), and
    answered (status, Reason, when), in flight first.

    Redacted as the logs are: no ResponseURL query string, no Data of a stored answer. With
    --config (or the daemon's queue), the store is that daemon's own."""
    from .requests import list_requests, open_listing, parse_duration, select, state_names, table

    state = state_of(state, daemon)

    try:
        window = parse_duration(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    try:
        wanted = state_names(states)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--state-is") from None

    async def go() -> list[dict[str, Any]]:
        store = open_listing(state, region)
        try:
            return await list_requests(store, window or None)
        finally:
            await store.close()

    rows = select(_run(go()), stack=stack, logical_id=logical_id, states=wanted)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo(
            f"no requests in {state} within {since}"
            + (" matching the filters" if stack or logical_id or states else "")
        )
    else:
        for line in table(rows):
            click.echo(line)


@click.command("answer")
@config_option
@click.argument("stack_id")
@click.argument("request_id")
@click.option(
    "--status",
    type=click.Choice(["FAILED", "SUCCESS"], case_sensitive=False),
    required=True,
    help="The answer's Status.",
)
@click.option("--reason", default="", help="The Reason CloudFormation shows (required with FAILED; default: none).")
@click.option(
    "--physical-id",
    help="The PhysicalResourceId (default: the request's; a Create: a FAILED one gets "
    "the timed-out marker, so its rollback Delete still reaches the handler).",
)
@state_option
@region_option
@click.option(
    "--from-dlq",
    is_flag=True,
    help="Take the request from the queue's dead-letter queue (read, not deleted) instead of the store's record.",
)
@name_options
@click.option("--dlq-url", help=DLQ_URL_HELP)
@click.option(
    "--allow-response-url",
    "allow_response_url",
    multiple=True,
    envvar=ENV + "ALLOW_RESPONSE_URL",
    metavar="PREFIX",
    help=ALLOW_RESPONSE_URL_HELP,
)
@click.option(
    "--topic-arn",
    "topic_arn",
    multiple=True,
    envvar=ENV + "TOPIC_ARN",
    metavar="ARN",
    help="As for run: with --from-dlq, only messages from this topic (repeatable; default: any topic).",
)
@click.option(
    "--verify-signatures/--no-verify-signatures",
    default=True,
    show_default=True,
    envvar=ENV + "VERIFY_SIGNATURES",
    help=VERIFY_SIGNATURES_HELP + " answer: with --from-dlq.",
)
@click.option(
    "--trust-signing-cert-url",
    "trust_signing_cert_url",
    multiple=True,
    metavar="PREFIX",
    envvar=ENV + "TRUST_SIGNING_CERT_URL",
    help=TRUST_SIGNING_CERT_URL_HELP,
)
@click.option(
    "--force",
    is_flag=True,
    help="Take over a request a daemon holds under a live lease (its handler "
    "may still be running; its own answer is then never sent), or end a "
    "stuck long-running request with FAILED (none of its poll steps "
    "running, or its deadline passed).",
)
@click.option(
    "--tenant",
    default="default",
    show_default=True,
    metavar="NAME",
    help="The tenant whose request it is (its principal: a web token's name, or the tenant of its topic); "
    "`cfn-provider requests` shows it.",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (required without a terminal).")
def answer_command(
    stack_id: str,
    request_id: str,
    status: Status,
    reason: str,
    physical_id: str | None,
    state: str | None,
    region: str | None,
    from_dlq: bool,
    queue_url: str | None,
    dlq_url: str | None,
    allow_response_url: tuple[str, ...],
    topic_arn: tuple[str, ...],
    verify_signatures: bool,
    trust_signing_cert_url: tuple[str, ...],
    force: bool,
    tenant: str,
    yes: bool,
    **daemon: Any,
) -> None:
    """The last resort: send the answer to a request the daemon cannot finish, and record it in
    the store so no daemon answers it again. Refused when the request is already answered.

    The request's ResponseURL comes from the store's record (written when a daemon claimed it) or,
    with --from-dlq, from the request in the queue's dead-letter queue, after the checks a daemon
    makes there (SNS signature, --topic-arn, ResponseURL allowlist); two different messages for the
    same StackId and RequestId are listed and refused."""
    from ..stores import open_store
    from . import answer as ops
    from .requests import existing

    if status == "FAILED" and not reason.strip():
        raise click.BadParameter("a FAILED answer needs a --reason saying why", param_hint="--reason")
    state = state_of(state, {**daemon, "queue_url": queue_url})
    dead = _from_dead_letters(queue_url, dlq_url, region, stack_id, request_id) if from_dlq else None

    async def go() -> int:
        import aiohttp

        from ..pipeline.request import idempotency_key
        from ..pipeline.responder import Responder

        store = open_store(existing(state), region=region)
        dead_text = None
        try:
            if dead is not None:
                dead_text = await _admitted(
                    dead, allow_response_url, topic_arn, verify_signatures, trust_signing_cert_url
                )
            record = await store.get(idempotency_key(stack_id, request_id, tenant))
            text = dead_text or ops.stored_text(record)  # the request; its principal is the tenant named
            request = replace(ops.request_from_text(text, stack_id, request_id, stored=not dead_text), principal=tenant)
            warning = ops.check(record, url_digest(request.response_url), time.time(), force, status)
            ops.allowed(request, allow_response_url)
            polled = ops.poll_state(record) if record is not None and record.state == POLLING else None
            response = ops.build(request, status, reason, physical_id or (polled.physical_id if polled else None))
            _show(request, response, record, "the dead-letter queue" if dead_text else "the store", warning)
            _confirm(yes)
            async with aiohttp.ClientSession() as session:
                sent = await ops.send(store, request, response, record, force, ops.owner(), Responder(session))
        except ops.Refused as exc:
            click.echo(f"refused: {exc}", err=True)
            return 1
        finally:
            await store.close()
        if not sent.delivered:
            click.echo(
                f"NOT delivered: {sent.detail}. The answer is stored: a daemon re-sends it when the request "
                "comes back.",
                err=True,
            )
            return 1
        click.echo(f"answered {response.status} ({sent.detail}); recorded in {state}")
        return 0

    sys.exit(_run(go()))


async def _admitted(
    candidates: list[Message],
    allow_response_url: tuple[str, ...],
    topic_arns: tuple[str, ...],
    verify: bool,
    trusted_cert_urls: tuple[str, ...],
) -> str:
    """The request among the dead-letter queue's `candidates` that passes the main path's admission
    (the queue is SQS: CloudFormation's rules)."""
    from ..pipeline.admission import Admission
    from ..trust.signature import SignatureVerifier
    from ..trust.urls import ResponseUrlPolicy
    from .answer import admitted_dead_letter

    verifier = SignatureVerifier(None, trusted_cert_urls) if verify else None
    try:
        admission = Admission(
            url_policy=ResponseUrlPolicy(allow_response_url),
            verifier=verifier,
            topic_arns=topic_arns,
            stopping=lambda: True,
        )  # an unreachable certificate: say so now
        return await admitted_dead_letter(candidates, admission)
    finally:
        if verifier is not None:
            await verifier.close()


def _from_dead_letters(
    queue_url: str | None, dlq_url: str | None, region: str | None, stack_id: str, request_id: str
) -> list[Message]:
    import boto3

    from .answer import dead_letter_candidates
    from .redrive import dead_letter_queue_url

    if not dlq_url and not queue_url:
        raise click.UsageError("--from-dlq needs --queue-url (or --dlq-url)")
    sqs = boto3.client("sqs", region_name=region)
    try:
        if not dlq_url:
            assert queue_url  # one of the two, refused above otherwise
            dlq_url = dead_letter_queue_url(sqs, queue_url)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    found = dead_letter_candidates(sqs, dlq_url, stack_id, request_id)
    if not found:
        raise click.ClickException(f"request {request_id} of {stack_id} is not in {dlq_url}")
    return found


def _show(request: Request, response: Response, record: Record | None, source: str, warning: str | None) -> None:
    from ..trust.urls import redact

    click.echo(
        f"request:  {request.request_type} {request.resource_type} {request.logical_id} "
        f"(stack {request.stack_name}, RequestId {request.request_id})"
    )
    click.echo(f"store:    {'no record' if record is None else f'{record.state}, held by {record.owner}'}")
    click.echo(f"send to:  {redact(request.response_url)} (from {source})")
    click.echo(
        f"answer:   {response.status} PhysicalResourceId={response.physical_id}"
        + (f" Reason={response.reason!r}" if response.reason else "")
    )
    if warning:
        click.echo(f"WARNING: {warning}", err=True)


def _confirm(yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        from .answer import Refused

        raise Refused("no terminal to confirm on: give --yes to send it")
    if not click.confirm("Send this answer?", default=False):
        from .answer import Refused

        raise Refused("not confirmed")
