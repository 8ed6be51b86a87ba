"""Build the response body CloudFormation reads from the ResponseURL.

Rules (docs/guarantees.md, "How each part is kept"): ids copied verbatim; PhysicalResourceId
non-empty and at most 1 KB; a failed Create gets a recognisable marker id so its rollback Delete is
answered without the handler, unless the handler was cut short (timed out, shutdown, dead-lettered):
then it may still create its resource afterwards, and the Create gets a timed-out marker whose
rollback Delete does reach the handler (see `cut_short`); Data/NoEcho only on successful
Create/Update; the encoded body is at most 4096 bytes: Reason is trimmed first, and Data that still
does not fit turns the answer into FAILED saying so. Limits follow the request's dialect: a ROS id
is at most 255 bytes, never changes on Update (a new one is refused with FAILED), and NoEcho is not
sent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from ..dialects.ros import replacement_refused
from ..errors import HandlerFailure
from .request import Request, is_utf8, json_size

MAX_BODY = 4096
FAILED_CREATE_PREFIX = "cfn-provider-failed-create-"
TIMED_OUT_PREFIX = "cfn-provider-timed-out-"  # + the Create's RequestId + "-" + _binding digest
_RESULT_KEYS = {"PhysicalResourceId", "Data", "NoEcho"}
_ELLIPSIS = " [...]"


Status = Literal["SUCCESS", "FAILED"]


class Body(TypedDict):
    """The response body's JSON, as CloudFormation (and ROS) read it from the ResponseURL."""

    Status: Status
    Reason: str
    PhysicalResourceId: str
    StackId: str
    RequestId: str
    LogicalResourceId: str
    NoEcho: NotRequired[bool]  # only on a successful Create or Update, when the dialect has it
    Data: NotRequired[Mapping[str, Any]]


@dataclass(frozen=True)
class Response:
    status: Status
    physical_id: str
    reason: str
    body: bytes
    no_echo: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "SUCCESS"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _clip(text: str, limit: int) -> str:
    data = text.encode()
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def default_physical_id(request: Request) -> str:
    """Create with no id returned: deterministic from stack name, logical id and RequestId."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", f"{request.stack_name}-{request.logical_id}")
    return f"{_clip(stem, request.dialect.max_physical_id - 13)}-{_short_hash(request.request_id)}"


def failed_create_marker(request: Request) -> str:
    return FAILED_CREATE_PREFIX + _short_hash(request.stack_id + request.request_id)


def is_failed_create_marker(physical_id: str) -> bool:
    return physical_id.startswith(FAILED_CREATE_PREFIX)


def _binding(request: Request, create_request_id: str) -> str:
    """What a timed-out marker is bound to: the stack, the resource (logical id, type) and the
    exact properties of the Create, and that Create's RequestId (128 bits of SHA-256)."""
    doc = [request.stack_id, request.logical_id, request.resource_type, create_request_id, request.properties]
    text = json.dumps(doc, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:32]


def timed_out_marker(request: Request, create_request_id: str | None = None) -> str | None:
    """The id a Create cut short answers with; None when it would not fit the dialect's id limit
    (an outlandish RequestId): that Create gets the plain failed-Create marker."""
    rid = request.request_id if create_request_id is None else create_request_id
    marker = f"{TIMED_OUT_PREFIX}{rid}-{_binding(request, rid)}"
    return marker if json_size(marker) <= request.dialect.max_physical_id and is_utf8(marker) else None


def is_timed_out_marker(physical_id: str) -> bool:
    return physical_id.startswith(TIMED_OUT_PREFIX)


def timed_out_create(request: Request) -> str | None:
    """For a Delete carrying a timed-out marker: the RequestId of the Create that gave it, when the
    marker matches this Delete's stack, logical id, type and properties; else None (the marker is
    attacker-chosen text here: the caller must also find that Create's FAILED answer in its store)."""
    if request.request_type != "Delete" or not is_timed_out_marker(request.physical_id):
        return None
    rid = request.physical_id[len(TIMED_OUT_PREFIX) :].rpartition("-")[0]
    return rid if rid and timed_out_marker(request, rid) == request.physical_id else None


def cut_short(request: Request, reason: str) -> Response:
    """FAILED for a request whose handler was cut short (timed out, stopped by shutdown, or never
    finished: dead-lettered) and so may still act. A Create answers with its timed-out marker, so
    CloudFormation's rollback Delete reaches the handler's `delete` with the Create's properties."""
    marker = timed_out_marker(request) if request.request_type == "Create" else None
    return failure(request, reason, marker)


def fallback_physical_id(request: Request) -> str:
    """The id a FAILED answer carries when nothing better is known."""
    if request.request_type == "Create" or not request.physical_id:
        return failed_create_marker(request)
    return request.physical_id


def failure(request: Request, reason: str, physical_id: str | None = None) -> Response:
    reason = reason.encode("utf-8", "replace").decode("utf-8") if reason else "failed"
    return _encode(request, "FAILED", physical_id or fallback_physical_id(request), reason)


def success(request: Request, result: Any) -> Response:
    """Interpret a handler's return value (None, a str id, or a mapping) as the answer.

    A Delete's return value is ignored, never validated: its answer carries neither a new id nor
    Data, and Lambda code ported over returns whatever it likes (True, a list, a boto response);
    a Delete that did its work must not be turned into FAILED by what it returned."""
    if request.request_type == "Delete":
        return _encode(request, "SUCCESS", request.physical_id or fallback_physical_id(request), "")
    try:
        physical_id, data, no_echo = _interpret(request, result)
    except _BadResult as exc:
        # The handler may have made something: a usable id it gave is kept, so the rollback Delete
        # reaches its handler (the failed-Create marker would answer that Delete without it).
        return failure(request, f"handler returned an unusable result: {exc}", exc.physical_id)
    if (
        request.request_type == "Update"
        and not request.dialect.replaces_on_update
        and physical_id != request.physical_id
    ):
        return failure(request, replacement_refused(request.physical_id, physical_id))
    response = _encode(request, "SUCCESS", physical_id, "", data, no_echo)
    if len(response.body) > MAX_BODY:
        size = len(response.body)
        reason = (
            f"response with Data is {size} bytes; CloudFormation accepts at most {MAX_BODY} "
            "bytes, so the result was not sent. Return less Data."
        )
        # Keep the handler's id: whatever it created must still get its Delete on rollback.
        return failure(request, reason, physical_id)
    return response


class _BadResult(HandlerFailure, ValueError):
    """A handler returned what cannot be an answer (the message says what); `physical_id`: the
    usable id it returned, if any (what it made is known by it)."""

    def __init__(self, message: str, physical_id: str | None = None):
        super().__init__(message)
        self.physical_id = physical_id


def _interpret(request: Request, result: Any) -> tuple[str, dict[str, Any] | None, bool]:
    if result is None:
        result = {}
    elif isinstance(result, str):
        result = {"PhysicalResourceId": result}
    elif not isinstance(result, Mapping):
        raise _BadResult(f"a {type(result).__name__}; expected None, a str id or a mapping")
    physical_id = _physical_id(request, result.get("PhysicalResourceId"))
    given = physical_id if "PhysicalResourceId" in result else None  # the handler's own id
    unknown = sorted(set(map(str, result)) - _RESULT_KEYS)
    if unknown:
        raise _BadResult(f"unknown keys {unknown}; allowed: {sorted(_RESULT_KEYS)}", given)
    data = result.get("Data")
    if data is not None:
        data = _json_data(data, given)
    return physical_id, data, bool(result.get("NoEcho", False)) and request.dialect.no_echo


def _physical_id(request: Request, returned: Any) -> str:
    if returned is None:
        return request.physical_id or default_physical_id(request)
    if not isinstance(returned, str) or not returned or not is_utf8(returned):
        raise _BadResult("PhysicalResourceId must be a non-empty string of valid UTF-8")
    if json_size(returned) > request.dialect.max_physical_id:
        limit = request.dialect.max_physical_id
        raise _BadResult(f"PhysicalResourceId is {json_size(returned)} bytes; the limit is {limit}")
    return returned


def _json_data(data: Any, physical_id: str | None) -> dict[str, Any]:
    """Data as strict JSON (no NaN/Infinity, no lone surrogates), or _BadResult naming the first
    key whose value is not (its name, never its value)."""
    if not isinstance(data, Mapping):
        raise _BadResult(f"Data is a {type(data).__name__}, not a mapping", physical_id)
    for key, value in data.items():
        try:
            json.dumps({str(key): value}, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            why = type(value).__name__ if isinstance(exc, TypeError) else str(exc)[:200]
            raise _BadResult(f"Data key {str(key)[:100]!r} is not JSON-serialisable ({why})", physical_id) from None
    loaded: dict[str, Any] = json.loads(json.dumps(dict(data), ensure_ascii=False, allow_nan=False))
    return loaded


def _encode(
    request: Request,
    status: Status,
    physical_id: str,
    reason: str,
    data: Mapping[str, Any] | None = None,
    no_echo: bool = False,
) -> Response:
    doc: Body = {
        "Status": status,
        "Reason": reason,
        "PhysicalResourceId": physical_id,
        "StackId": request.stack_id,
        "RequestId": request.request_id,
        "LogicalResourceId": request.logical_id,
    }
    if status == "SUCCESS" and request.request_type in ("Create", "Update"):
        if no_echo:
            doc["NoEcho"] = True
        if data:
            doc["Data"] = data
    body = _dumps(doc)
    if len(body) > MAX_BODY and reason:
        doc["Reason"] = _fit_reason(doc, reason)
        body = _dumps(doc)
    return Response(status, physical_id, doc["Reason"], body, bool(doc.get("NoEcho")))


def _dumps(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _fit_reason(doc: Body, reason: str) -> str:
    """The longest prefix of `reason` (plus a marker) that keeps the body within MAX_BODY."""
    lo, hi = 0, len(reason)
    while lo < hi:  # binary search on characters: JSON escaping makes bytes unpredictable
        mid = (lo + hi + 1) // 2
        if len(_dumps({**doc, "Reason": reason[:mid] + _ELLIPSIS})) <= MAX_BODY:
            lo = mid
        else:
            hi = mid - 1
    return reason[:lo] + _ELLIPSIS
