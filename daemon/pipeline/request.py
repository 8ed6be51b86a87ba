"""Parse a CloudFormation custom-resource request.

Two kinds of bad request are told apart:
- `NotARequest`: nothing to answer (no usable ResponseURL or ids). Logged, never run.
- a `Request` whose `problems` is non-empty: answerable, so it gets FAILED naming them.

Each request has the dialect its transport gives `parse` (cfn_provider.dialects.base): CloudFormation
on SNS/SQS, ROS on MNS and the HTTP listener. Nothing in the request changes it: a field only the
other dialect has is ignored (`Request.ignored` names it for the log). What a store keeps of a
request (`stored_form`) names that dialect, so a later reader (a poll step on any fleet member,
`cfn-provider answer`) applies the same rules (`from_stored`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from ..dialects.base import CLOUDFORMATION, Dialect
from ..dialects.ros import DIALECTS
from ..errors import InputError
from ..trust.tenants import DEFAULT as DEFAULT_PRINCIPAL

REQUEST_TYPES = ("Create", "Update", "Delete")
# Without these nothing can be answered: they are copied into every response.
ANSWERABLE = ("ResponseURL", "StackId", "RequestId", "LogicalResourceId")
# Upper bounds that keep even a FAILED response under 4096 bytes; CloudFormation stays far below.
ID_LIMITS = {"ResponseURL": 8192, "StackId": 1024, "RequestId": 256, "LogicalResourceId": 256}
MAX_PHYSICAL_ID = CLOUDFORMATION.max_physical_id
DEFAULT_SERVICE_TIMEOUT = CLOUDFORMATION.default_timeout
MAX_DEPTH = 64  # nesting far beyond any real template; deeper would exhaust the stack


# What JSON escapes of ASCII (with DEL, which it does not): an ASCII text without these is written as it is.
_ASCII_ESCAPED = bytes(range(0x20)) + b'\x7f"\\'


def plain_ascii(text: str) -> bool:
    """Whether `text` is printable ASCII without a quote or a backslash: what a JSON body holds as
    it is, one byte a character (the usual id). One byte pass deleting the rest: half the time of
    str.isprintable() on a ResponseURL."""
    return text.isascii() and len(text.encode().translate(None, _ASCII_ESCAPED)) == len(text)


def json_size(text: str) -> int:
    """Bytes `text` takes inside a JSON body (escapes included): what the 4096-byte limit counts."""
    if plain_ascii(text):
        return len(text)  # nothing to escape: one byte a character
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2


def is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. from a "\ud800" escape
        return False
    return True


class NotARequest(InputError, ValueError):
    """The message is not an answerable CloudFormation request."""

    def __init__(self, message: str, dialect: Dialect = CLOUDFORMATION):
        super().__init__(message)
        self.dialect = dialect  # the transport's, for the log line


class FrozenDict(dict[str, Any]):
    """A dict that refuses mutation; still a dict, so json.dumps(event) works in handlers."""

    def _readonly(self, *_: Any, **__: Any) -> None:
        raise TypeError("the request is read-only; copy it (dict(event)) to change it")

    # one refusal for every mutating method: their signatures differ from _readonly's, hence the ignores
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly  # type: ignore[assignment]
    __ior__ = _readonly  # type: ignore[assignment]

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        copy: dict[str, Any] = json.loads(json.dumps(self))
        return copy


class TooDeep(NotARequest):
    """A request nests deeper than MAX_DEPTH levels (`freeze` stops there)."""


_set_item = dict.__setitem__  # how freeze fills a FrozenDict, whose own __setitem__ refuses


def freeze(value: Any, room: int = MAX_DEPTH) -> Any:
    """`value` read-only all the way down (FrozenDict, tuples), in one walk that also refuses
    nesting deeper than `room` levels (TooDeep). Recursion is bounded by `room`, so it is safe on
    anything json.loads accepted; scalars are not visited as calls of their own."""
    if room < 1:
        raise TooDeep(f"request nests deeper than {MAX_DEPTH} levels")
    room -= 1
    if isinstance(value, dict):
        frozen = FrozenDict(value)  # copied whole (C), then only the containers in it replaced
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                _set_item(frozen, key, freeze(item, room))
        return frozen
    if isinstance(value, list):
        return tuple(freeze(v, room) if isinstance(v, (dict, list)) else v for v in value)
    return value


class RequestFields:
    """Typed reads of the wire fields, shared by the daemon's Request and the SDK's Call."""

    def _mapping(self) -> Mapping[str, Any]:
        raise NotImplementedError

    def _str(self, name: str) -> str:
        value = self._mapping().get(name)
        return value if isinstance(value, str) else ""

    @property
    def request_type(self) -> str:
        return self._str("RequestType")

    @property
    def resource_type(self) -> str:
        return self._str("ResourceType")

    @property
    def stack_id(self) -> str:
        return self._str("StackId")

    @property
    def request_id(self) -> str:
        return self._str("RequestId")

    @property
    def logical_id(self) -> str:
        return self._str("LogicalResourceId")

    @property
    def stack_name(self) -> str:
        return stack_name_from_id(self.stack_id)


def stack_name_from_id(stack_id: str) -> str:
    """arn:aws:cloudformation:REGION:ACCOUNT:stack/NAME/UUID -> NAME (or the id itself)."""
    parts = stack_id.split("/")
    return parts[1] if len(parts) >= 3 and parts[0].endswith(":stack") else stack_id


@dataclass(frozen=True)
class Request(RequestFields):
    wire: FrozenDict  # exactly what a Lambda custom resource receives
    problems: tuple[str, ...] = ()
    dialect: Dialect = CLOUDFORMATION
    principal: str = DEFAULT_PRINCIPAL  # who sent it, proven by its transport (cfn_provider.trust.tenants)

    def __init__(
        self,
        wire: FrozenDict,
        problems: tuple[str, ...] = (),
        dialect: Dialect = CLOUDFORMATION,
        principal: str = DEFAULT_PRINCIPAL,
    ) -> None:
        # The fields stored straight into the instance's dict, as the frozen dataclass's own
        # __init__ does with object.__setattr__ (one call per field): half the time, for every message.
        fields = self.__dict__
        fields["wire"], fields["problems"], fields["dialect"], fields["principal"] = wire, problems, dialect, principal

    def _mapping(self) -> Mapping[str, Any]:
        return self.wire

    @property
    def stack_name(self) -> str:
        """A ROS request names its stack in StackName; otherwise the name inside the StackId ARN."""
        named = self._str(self.dialect.stack_name_field) if self.dialect.stack_name_field else ""
        return named or super().stack_name

    def log_context(self) -> dict[str, str]:
        """What every log line about this request carries (bound with structlog's contextvars by the
        worker and the poll steps alike)."""
        return {
            "request_id": self.request_id,
            "stack": self.stack_name,
            "logical_id": self.logical_id,
            "resource_type": self.resource_type,
            "request_type": self.request_type,
            "dialect": self.dialect.name,
        }

    @property
    def response_url(self) -> str:
        return self._str("ResponseURL")

    @property
    def ignored(self) -> tuple[str, ...]:
        """Fields of another dialect that the request carries (never read: named in the log)."""
        fields = self.dialect.ignored_fields
        if self.wire.keys().isdisjoint(fields):  # the usual request
            return ()
        return tuple(name for name in fields if name in self.wire)

    @property
    def intranet_response_url(self) -> str:
        """ROS's IntranetResponseURL ('' when absent or not a string)."""
        return self._str("IntranetResponseURL")

    @property
    def physical_id(self) -> str:
        """The request's PhysicalResourceId when it is usable in a response, else ''."""
        value = self._str("PhysicalResourceId")
        return value if json_size(value) <= self.dialect.max_physical_id and is_utf8(value) else ""

    @property
    def properties(self) -> Mapping[str, Any]:
        props = self.wire.get("ResourceProperties")
        return props if isinstance(props, dict) else FrozenDict()

    @functools.cached_property  # read by every store call of the request; its fields never change
    def key(self) -> str:
        """Idempotency key: StackId + RequestId (+ the principal, unless it is the default one)."""
        return idempotency_key(self.stack_id, self.request_id, self.principal)

    @property
    def service_timeout(self) -> int:
        """The dialect's timeout property from ResourceProperties, clamped to 1..its maximum:
        CloudFormation's ServiceTimeout (default and at most 3600 s), ROS's Timeout (default 60 s)."""
        d = self.dialect
        raw = self.properties.get(d.timeout_property)
        try:
            value = int(str(raw).strip()) if raw is not None else d.default_timeout
        except ValueError:
            return d.default_timeout
        return min(max(value, 1), d.max_timeout)


def idempotency_key(stack_id: str, request_id: str, principal: str = DEFAULT_PRINCIPAL) -> str:
    """The store's key of a request: StackId + RequestId, unambiguous whatever the ids contain. A
    principal other than the default one is part of it: no other principal's request can name its
    records (the default principal's keys are those every earlier release wrote)."""
    if principal == DEFAULT_PRINCIPAL:
        return json.dumps([stack_id, request_id])
    return json.dumps([stack_id, request_id, principal])


# orjson reads an integer outside 64 bits as a float, where json.loads keeps the integer. Such an
# integer is written with at least 19 digits in a row: a text without 19 digits in a row holds none.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_NINETEEN_DIGITS = b"0" * 19


def read_json(text: str, exact_integers: bool = True) -> Any:
    """json.loads(text): the same values of the same types, or the same error, in a third to two
    thirds of its time. orjson reads it, and json.loads where orjson refuses it (NaN, a lone
    surrogate, a number past a double's range). With `exact_integers` (a request: a handler gets the
    integer it was sent), json.loads also reads a text that may hold an integer past 64 bits, which
    orjson would make a float: 19 digits in a row, found by a byte table (Python's regex costs more
    than json.loads saves). tests/pipeline/test_fast_paths.py holds the readings together."""
    if exact_integers:
        try:
            long_digits = _NINETEEN_DIGITS in text.encode().translate(_DIGITS_AS_ZERO)
        except UnicodeEncodeError:  # a lone surrogate: orjson refuses it, json.loads reads it
            long_digits = True
        if long_digits:
            return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def parse(text: str, dialect: Dialect = CLOUDFORMATION, principal: str = DEFAULT_PRINCIPAL) -> Request:
    """Parse a request under `dialect`, its transport's, sent by `principal`, as its transport
    proved (nothing in the request changes either)."""
    try:
        doc = read_json(text)
    except (ValueError, RecursionError) as exc:
        raise NotARequest(f"message is not JSON ({type(exc).__name__})", dialect) from None
    return _request(doc, dialect, principal)


def stored_form(request: Request) -> str:
    """What a store keeps of a request (a record's `request`): its wire fields and its dialect.
    A wire request always has a ResponseURL; this document never does, so the two cannot be
    confused, whatever a request carries. A principal other than the default one is kept too."""
    doc: dict[str, Any] = {"Dialect": request.dialect.name, "Request": request.wire}
    if request.principal != DEFAULT_PRINCIPAL:
        doc["Principal"] = request.principal
    return json.dumps(doc, separators=(",", ":"))


def stored_parts(text: str) -> tuple[Any, Dialect | None]:
    """(the wire request, its dialect) from a record's `request`; the dialect is None for a record
    written before dialects were stored (the bare request). Raises NotARequest for a stored
    document that names an unknown dialect, ValueError for text that is not JSON."""
    doc = json.loads(text)
    if isinstance(doc, dict) and "ResponseURL" not in doc and set(doc) - {"Principal"} == {"Dialect", "Request"}:
        dialect = DIALECTS.get(doc["Dialect"]) if isinstance(doc["Dialect"], str) else None
        if dialect is None:
            raise NotARequest(f"stored under an unknown dialect {str(doc['Dialect'])[:40]!r}")
        return doc["Request"], dialect
    return doc, None


def from_stored(text: str, fallback: Dialect) -> Request:
    """A stored request under the dialect it was stored with; `fallback` (the reader's transport's)
    for a record written before dialects were stored."""
    try:
        doc, dialect = stored_parts(text)
    except NotARequest:
        raise
    except (ValueError, RecursionError) as exc:
        raise NotARequest(f"stored request is not JSON ({type(exc).__name__})", fallback) from None
    request = _request(doc, dialect or fallback)
    return replace(request, principal=stored_principal(text)) if dialect is not None else request


def stored_principal(text: str) -> str:
    """The principal a stored request was sent by (the default one unless the record names another)."""
    doc = json.loads(text)
    principal = doc.get("Principal") if isinstance(doc, dict) and "ResponseURL" not in doc else None
    return principal if isinstance(principal, str) and principal else DEFAULT_PRINCIPAL


def _request(doc: Any, dialect: Dialect, principal: str = DEFAULT_PRINCIPAL) -> Request:
    if not isinstance(doc, dict):
        raise NotARequest(f"message is a JSON {type(doc).__name__}, not an object", dialect)
    for key, limit in ID_LIMITS.items():  # the usual ids pass here; any other is judged rule by rule
        value = doc.get(key)
        # plain_ascii, inline (four calls a request saved): json_size's fast case, one byte a character
        if not (
            type(value) is str
            and 0 < len(value) <= limit
            and value.isascii()
            and len(value.encode().translate(None, _ASCII_ESCAPED)) == len(value)
        ):
            _refuse_ids(doc, dialect)
            break
    try:
        wire = freeze(doc)
    except TooDeep as exc:  # answer FAILED from the top-level strings alone
        shallow = {k: v for k, v in doc.items() if isinstance(v, str)}
        return Request(wire=freeze(shallow), problems=(str(exc),), dialect=dialect, principal=principal)
    return Request(wire, tuple(_problems(doc, dialect)), dialect, principal)


def _refuse_ids(doc: dict[str, Any], dialect: Dialect) -> None:
    """NotARequest naming every answerable id that is missing, not a string, oversized or not
    valid UTF-8 (the first of those rules any of them breaks)."""
    unusable = [k for k in ANSWERABLE if not isinstance(doc.get(k), str) or not doc[k]]
    if unusable:
        raise NotARequest(f"cannot be answered: missing or non-string {', '.join(unusable)}", dialect)
    too_long = [k for k, limit in ID_LIMITS.items() if json_size(doc[k]) > limit]
    if too_long:
        raise NotARequest(f"cannot be answered: oversized {', '.join(too_long)}", dialect)
    broken = [k for k in ANSWERABLE if not is_utf8(doc[k])]
    if broken:
        raise NotARequest(f"cannot be answered: {', '.join(broken)} not valid UTF-8", dialect)


_NO_PROPERTIES: dict[str, Any] = {}


def _problems(doc: dict[str, Any], dialect: Dialect = CLOUDFORMATION) -> list[str]:
    """What makes `doc` a request to answer FAILED (`_all_problems`); the usual request is told
    apart in one expression first, in half the time (tests/pipeline/test_fast_paths.py)."""
    kind, rtype, physical_id = doc.get("RequestType"), doc.get("ResourceType"), doc.get("PhysicalResourceId", "")
    if (
        kind in REQUEST_TYPES  # only a string is equal to one (JSON has no string subclass)
        and type(rtype) is str
        and type(physical_id) is str
        and (physical_id != "" or kind != "Update")
        and len(physical_id) <= dialect.max_physical_id
        and plain_ascii(physical_id)  # then its JSON size is its length, and it is UTF-8
        and (dialect.max_resource_type is None or len(rtype) <= dialect.max_resource_type)
        and type(doc.get("ResourceProperties", _NO_PROPERTIES)) is dict
        and type(doc.get("OldResourceProperties", _NO_PROPERTIES)) is dict
    ):
        return []
    return _all_problems(doc, dialect)


def _all_problems(doc: dict[str, Any], dialect: Dialect) -> list[str]:
    problems = []
    missing = [k for k in ("RequestType", "ResourceType") if k not in doc]
    if missing:
        problems.append(f"missing fields: {', '.join(missing)}")
    for name in ("RequestType", "ResourceType", "PhysicalResourceId"):
        if name in doc and not isinstance(doc[name], str):
            problems.append(f"{name} is a {type(doc[name]).__name__}, not a string")
    kind = doc.get("RequestType")
    if isinstance(kind, str) and kind not in REQUEST_TYPES:
        problems.append(f"RequestType {kind[:40]!r} is not one of {', '.join(REQUEST_TYPES)}")
    if kind == "Update" and not doc.get("PhysicalResourceId"):
        problems.append("missing fields: PhysicalResourceId (required on Update)")
    physical_id, limit = doc.get("PhysicalResourceId"), dialect.max_physical_id
    if isinstance(physical_id, str) and (json_size(physical_id) > limit or not is_utf8(physical_id)):
        problems.append(f"PhysicalResourceId is not valid UTF-8 of at most {limit} bytes")
    rtype, rlimit = doc.get("ResourceType"), dialect.max_resource_type
    if rlimit is not None and isinstance(rtype, str) and len(rtype) > rlimit:
        problems.append(f"ResourceType is {len(rtype)} characters; ROS allows at most {rlimit}")
    for name in ("ResourceProperties", "OldResourceProperties"):
        if name in doc and not isinstance(doc[name], dict):
            problems.append(f"{name} is a {type(doc[name]).__name__}, not an object")
    return problems
