"""The MNS topic allowlist: which topics' notifications an MNS queue's daemon serves (`--mns-topic`).

Topics are named as ROS names them in a ServiceToken, `acs:mns:REGION:ACCOUNT:topics/NAME`.
An MNS notification names its topic by owner (the account) and name only, not by region: MNS
pushes a topic's messages only to queues of the topic's own region and account. So a
notification's topic is written `acs:mns::OWNER:topics/NAME` (`notification_topic`), the
allowlist is kept in that same form (`allowlist`), and an entry for another region or account
than the queue's endpoint (`https://ACCOUNT.mns.REGION.aliyuncs.com`) is refused at start: no
notification could ever come from it.

MNS notifications are not signed: anyone who may send to the queue (`mns:SendMessage`) can
write one naming any topic. The allowlist keeps out notifications of the account's other topics
(a topic subscribed to the queue by mistake, or by someone who may subscribe topics but not
send to the queue); who may send to the queue is still RAM's decision (docs/ros.md).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_REGION = r"[a-z]{2}(?:-[a-z0-9]+)+"
_TOPIC = re.compile(rf"^acs:mns:(?P<region>{_REGION}):(?P<account>[0-9]+):topics/(?P<name>[A-Za-z0-9-]{{1,256}})\Z")
_ENDPOINT = re.compile(rf"^(?P<account>[0-9]+)\.mns\.(?P<region>{_REGION}?)(?:-internal(?:-vpc)?)?\.aliyuncs\.com\Z")
FORM = "acs:mns:REGION:ACCOUNT:topics/NAME"


def notification_topic(owner: str, name: str) -> str:
    """How an MNS notification's topic is named (its region is the queue's)."""
    return f"acs:mns::{owner}:topics/{name}"


def endpoint_identity(endpoint: str) -> tuple[str, str] | None:
    """(account, region) of an MNS endpoint such as https://123.mns.cn-hangzhou.aliyuncs.com; None
    when the endpoint does not say (a local emulator)."""
    m = _ENDPOINT.match((urlsplit(endpoint).hostname or "").lower())
    return (m["account"], m["region"]) if m else None


def allowlist(topics: tuple[str, ...] | list[str], endpoint: str) -> tuple[str, ...]:
    """The allowlist in notification form; ValueError naming an entry that is malformed, or of
    another account or region than `endpoint`'s queue."""
    identity = endpoint_identity(endpoint)
    out = []
    for topic in topics:
        m = _TOPIC.match(topic)
        if m is None:
            raise ValueError(f"--mns-topic {topic!r} is not a topic like {FORM}")
        if identity is not None and (m["account"], m["region"]) != identity:
            raise ValueError(
                f"--mns-topic {topic!r} is not of the queue's account {identity[0]} and region "
                f"{identity[1]} (--mns-endpoint): MNS pushes a topic's messages only to queues of its "
                "own account and region"
            )
        out.append(notification_topic(m["account"], m["name"]))
    return tuple(out)
