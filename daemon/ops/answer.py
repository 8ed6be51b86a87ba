"""`cfn-provider answer`: the last resort, an operator's answer to a request the daemon cannot finish.

The request (and so its ResponseURL) comes from the store's record, written when a daemon claimed
it, or from the queue's dead-letter queue (`dead_letter_candidates`: read, never deleted), where
each message goes through the main path's admission first (`admitted_dead_letter`) and two
different requests under one StackId/RequestId are refused, listed. The answer
is built by the daemon's own rules (cfn_provider.pipeline.response: ids copied, the 4096-byte
guard; a FAILED Create gets the timed-out marker, so its rollback Delete still reaches the
handler), the ResponseURL must pass the same allowlist as in `run`, and it goes through the store
as a daemon's would: claim (a token of its own), save_response, PUT, mark_sent. So no daemon
answers the request again: a redelivery finds it answered (or, if the PUT failed, re-sends the
very body stored).

Refused (`Refused`) when the request is already answered, when an answer is stored and awaits
delivery, and when a daemon holds it under a live lease, unless `force`: then the holder's lease is
ended first (with its own token, as it would end it), and the holder, when it finishes, finds its
claim lost and sends nothing (`store.lost_claim` in its log).

A long-running request (POLLING) is answered by its polls; one that is stuck (no daemon polls it,
or a poll step never ends) can be answered FAILED with `force`, only while no poll step holds it
or once its deadline has passed: the operator's answer takes the poll (`take_poll`, early: due
or not; a step still holding it past the deadline has its lease ended first), stores the answer
and sends it, which ends the polling (a step that was running finds its token gone). Its id is the
one the action gave, when it gave one.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..dialects.base import CLOUDFORMATION
from ..errors import NotAdmitted, OperatorError
from ..pipeline import response as responses
from ..pipeline.admission import Admission
from ..pipeline.envelope import BadMessage, unwrap
from ..pipeline.poll_steps import PollState
from ..pipeline.request import NotARequest, Request, from_stored, parse, stored_form
from ..stores.base import POLLING, RESPONSE_READY, SENT, Record, Store, new_token
from ..stores.base import url_digest as store_url_digest  # `url_digest` is a local name below
from ..transports.queue import Message
from ..trust.urls import ResponseUrlPolicy, UrlRejected, redact

if TYPE_CHECKING:
    from ..pipeline.responder import Responder

LEASE = 300.0  # seconds the operator's claim holds the request while the answer is PUT
TAKEOVER_TRIES = 5


class Refused(OperatorError):
    """The answer is not sent; the message says why and what to do instead."""


def owner() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"cfn-provider answer ({user}@{socket.gethostname()})"


def request_from_text(text: str, stack_id: str, request_id: str, *, stored: bool = True) -> Request:
    """The request as the daemon parses it; it must be the one named. `stored`: a store record's
    `request`, under the dialect it was stored with (CloudFormation's for a record written before
    dialects were stored); else a request from the SQS dead-letter queue: CloudFormation's."""
    try:
        request = from_stored(text, CLOUDFORMATION) if stored else parse(text, CLOUDFORMATION)
    except NotARequest as exc:
        raise Refused(f"the stored request cannot be answered: {exc}") from None
    if (request.stack_id, request.request_id) != (stack_id, request_id):
        raise Refused("the request found is not the one named (StackId / RequestId differ)")
    return request


def dead_letter_candidates(sqs: Any, dlq_url: str, stack_id: str, request_id: str, limit: int = 1000) -> list[Message]:
    """Every message in the dead-letter queue whose body names this StackId and RequestId, as read
    (nothing is believed yet: `admitted_dead_letter` puts each through the main path's admission).
    Nothing is deleted: the messages received are hidden while the search goes on (so each receive
    brings new ones), then made visible again at once."""
    held: list[str] = []
    found: list[Message] = []
    try:
        while len(held) < limit:
            batch = sqs.receive_message(
                QueueUrl=dlq_url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=1,
                VisibilityTimeout=60,
                AttributeNames=["SentTimestamp"],
            ).get("Messages", [])
            if not batch:
                break
            for message in batch:
                held.append(message["ReceiptHandle"])
                sent_ms = int(message.get("Attributes", {}).get("SentTimestamp", "0") or 0)
                candidate = Message(
                    message["MessageId"],
                    message["Body"],
                    message["ReceiptHandle"],
                    datetime.fromtimestamp(sent_ms / 1000, UTC),
                )
                if _names(candidate, stack_id, request_id):
                    found.append(candidate)
    finally:
        for receipt in held:
            sqs.change_message_visibility(QueueUrl=dlq_url, ReceiptHandle=receipt, VisibilityTimeout=0)
    return found


def _names(message: Message, stack_id: str, request_id: str) -> bool:
    try:
        doc = json.loads(unwrap(message.body, message.id, message.sent_at).message)
    except (BadMessage, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("StackId") == stack_id and doc.get("RequestId") == request_id


async def admitted_dead_letter(candidates: list[Message], admission: Admission) -> str:
    """The request (its JSON) that the dead-letter queue's messages for it carry, once each has been
    through the main path's admission (signature, topic allowlist, ResponseURL allowlist), so a
    forged message never decides where the operator's answer goes or what it says. Refused when
    none is admitted, or when different requests are (listed): the operator must choose, not the queue."""
    admitted: dict[str, tuple[Message, Request]] = {}
    rejected: list[str] = []
    for message in candidates:
        try:
            envelope, request = await admission.admit(message)
        except NotAdmitted as exc:  # rejected, forged, or a certificate not to be had now
            rejected.append(f"message {message.id}: {exc}")
            continue
        admitted.setdefault(envelope.message, (message, request))  # copies of one request are one
    if not admitted:
        raise Refused(
            "no message for this request in the dead-letter queue passes the checks a daemon makes "
            "(signature, --topic-arn, ResponseURL allowlist): " + "; ".join(rejected)
        )
    if len(admitted) > 1:
        listed = "; ".join(
            f"message {m.id}: {r.request_type}, ResponseURL {redact(r.response_url)}, "
            f"PhysicalResourceId {r.physical_id or '-'}"
            for m, r in admitted.values()
        )
        raise Refused(
            f"{len(admitted)} different messages in the dead-letter queue carry this StackId and "
            f"RequestId: {listed}. Not choosing between them: find out which is CloudFormation's, "
            "remove the other(s) from the dead-letter queue, and run this again"
        )
    return next(iter(admitted))


def stored_text(record: Record | None) -> str:
    """The request the store's record holds, or Refused saying where else to look."""
    if record is None:
        raise Refused(
            "the store has no record of this request: no daemon has claimed it. If it is in the "
            "queue's dead-letter queue, answer it from there with --from-dlq (and --queue-url)."
        )
    if not record.request:
        raise Refused(
            "the store's record of this request holds no request (it was claimed by a daemon older "
            "than stored requests), so no ResponseURL is known; try --from-dlq"
        )
    return record.request


def poll_state(record: Record | None) -> PollState | None:
    """A long-running request's stored progress (its deadline, its id so far), or None if unreadable."""
    try:
        return PollState.loads(record.progress or "") if record is not None else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _check_polling(record: Record, now: float, force: bool, status: str) -> str:
    state = poll_state(record)
    deadline = state.deadline if state is not None else None
    if not force:
        raise Refused(
            "it is a long-running request waiting for its next poll: a daemon answers it when a poll "
            "says done, or FAILED at its deadline (ServiceTimeout). If it is stuck (no daemon polls it), "
            "--force answers it FAILED and ends its polling"
        )
    if status != "FAILED":
        raise Refused("a long-running request is ended by hand with --status FAILED only")
    past = deadline is not None and deadline <= now
    if record.leased(now) and record.lease_until is not None and not past:
        raise Refused(
            f"a poll step holds it right now ({record.owner}, lease {round(record.lease_until - now)} s "
            "left) and its deadline has not passed: wait for the step to end"
        )
    left = (
        "its deadline has passed"
        if past
        else ("no daemon holds it" if deadline is not None else "its progress cannot be read")
    )
    return (
        f"ENDING A LONG-RUNNING REQUEST ({left}): its polling stops and its action, if it is still "
        "running somewhere, is not asked again; its own answer will not be sent."
    )


def check(record: Record | None, url_digest: str, now: float, force: bool, status: str = "FAILED") -> str | None:
    """Refused when the answer must not be sent; a warning (str) when it may be sent only by force."""
    if record is None or record.expires_at <= now:
        return None
    if record.answered(url_digest) or (record.state == SENT and record.status != "FAILED"):
        raise Refused(f"already answered: {record.status or '?'} ({record.state}); nothing to do")
    # SENT FAILED to another ResponseURL: CloudFormation asked again (a FAILED is re-run): answerable
    if record.state == RESPONSE_READY:
        raise Refused(
            f"an answer ({record.status}) is stored and awaits delivery: a daemon re-sends it when the "
            "message comes back (a redelivery, the dead-letter watcher, `cfn-provider redrive`)"
        )
    if record.state == POLLING:  # a long-running request: its record, not a message, drives it
        return _check_polling(record, now, force, status)
    if record.leased(now) and record.lease_until is not None:  # CLAIMED (or any state a daemon holds under a lease)
        held = f"held by {record.owner} (lease {round(record.lease_until - now)} s left)"
        if not force:
            raise Refused(
                f"{held}: its handler may still be running. Wait for the lease to lapse, or take it over with --force"
            )
        if not record.token:
            raise Refused(f"{held}, by a claim without a token: wait for the lease to lapse")
        return (
            f"TAKING OVER: {held}. Its handler may still be running and may still create or change "
            "the resource; its own answer will not be sent."
        )
    return None


def build(request: Request, status: responses.Status, reason: str, physical_id: str | None) -> responses.Response:
    """The answer by the daemon's rules (a SUCCESS carries no Reason and no Data). FAILED without an
    id: a Create gets the timed-out marker (its rollback Delete reaches the handler, which may have
    created something), an Update or Delete keeps the request's id."""
    if status == "FAILED":
        if physical_id:
            return responses.failure(request, reason, physical_id)
        return responses.cut_short(request, reason)
    return responses.success(request, {"PhysicalResourceId": physical_id} if physical_id else None)


@dataclass
class Sent:
    delivered: bool
    detail: str


def allowed(request: Request, allow_prefixes: tuple[str, ...]) -> None:
    try:
        ResponseUrlPolicy(allow_prefixes).check(request.response_url, request.dialect.response_hosts)
    except UrlRejected as exc:
        raise Refused(
            f"ResponseURL {redact(request.response_url)!r} rejected: {exc} "
            "(an emulator's URL needs --allow-response-url, as for run)"
        ) from None


async def send(
    store: Store,
    request: Request,
    answer: responses.Response,
    record: Record | None,
    force: bool,
    who: str,
    responder: Responder,
) -> Sent:
    """Claim the request, store the answer, PUT it, mark it sent."""
    key, url_digest, token = (
        request.key,
        store_url_digest(request.response_url),
        new_token(),
    )
    text = stored_form(request)
    for _ in range(TAKEOVER_TRIES):
        if force and record is not None and record.token and record.leased(time.time()):
            await store.extend(key, record.token, 0)  # end the holder's lease, as the holder would
        if record is not None and record.state == POLLING:  # a claim never takes a poll: take the poll itself
            if await store.take_poll(key, who, LEASE, token=token, early=True) is not None:
                break
            record = await store.get(key)
            check(record, url_digest, time.time(), force, answer.status)  # raises unless it may try again
            continue
        claim = await store.claim(key, who, url_digest, LEASE, token=token, request=text)
        if claim.acquired:
            break
        record = claim.record
        check(record, url_digest, time.time(), force, answer.status)  # raises unless a takeover may try again
        if not force:
            raise Refused(f"the store refused the claim (state {record.state if record else '?'})")
    else:
        raise Refused("the holder kept renewing its lease; stop its daemon, or wait")
    if not await store.save_response(key, token, answer.status, answer.body):
        raise Refused("another claim took the request over while the answer was being stored; nothing was sent")
    delivery = await responder.send([request.response_url], answer.body, request.dialect)
    if delivery.delivered:
        await store.mark_sent(key, url_digest, token)
        return Sent(True, delivery.detail)
    await store.extend(key, token, 0)  # the stored answer is re-sent by whichever daemon meets the request next
    return Sent(False, delivery.detail)
