"""The MNS topic allowlist (cfn_provider.trust.topics): ROS's ServiceToken form, checked against the
queue's endpoint, kept in the form a notification names its topic."""

from __future__ import annotations

import pytest

from cfn_provider.trust.topics import allowlist, endpoint_identity, notification_topic


@pytest.mark.parametrize(
    "endpoint, identity",
    [
        ("https://1234567890.mns.cn-hangzhou.aliyuncs.com", ("1234567890", "cn-hangzhou")),
        ("https://1234567890.mns.cn-hangzhou-internal.aliyuncs.com", ("1234567890", "cn-hangzhou")),
        ("https://1234567890.mns.cn-hangzhou-internal-vpc.aliyuncs.com/", ("1234567890", "cn-hangzhou")),
        ("https://1234567890.mns.ap-southeast-1.aliyuncs.com", ("1234567890", "ap-southeast-1")),
        ("http://127.0.0.1:9000", None),  # an emulator: it does not say
        ("https://1234567890.mns.cn-hangzhou.aliyuncs.com.evil.example", None),
    ],
)
def test_the_endpoint_names_the_queues_account_and_region(endpoint, identity):
    assert endpoint_identity(endpoint) == identity


def test_entries_are_kept_as_a_notification_names_its_topic():
    topics = ["acs:mns:cn-hangzhou:1234567890:topics/ros-topic", "acs:mns:cn-hangzhou:1234567890:topics/b-2"]
    kept = allowlist(topics, "https://1234567890.mns.cn-hangzhou-internal.aliyuncs.com")
    assert kept == (notification_topic("1234567890", "ros-topic"), notification_topic("1234567890", "b-2"))
    assert kept[0] == "acs:mns::1234567890:topics/ros-topic"
    assert allowlist(["acs:mns:eu-central-1:42:topics/t"], "http://127.0.0.1:9000") == ("acs:mns::42:topics/t",)


@pytest.mark.parametrize(
    "topic, why",
    [
        ("acs:mns:cn-hangzhou:1234567890:queues/q", "is not a topic like"),
        ("acs:mns:cn-hangzhou:1234567890:topics/", "is not a topic like"),
        ("acs:mns:cn-hangzhou:1234567890:topics/a/b", "is not a topic like"),
        ("acs:mns:cn-hangzhou:12ab:topics/t", "is not a topic like"),
        ("acs:mns:cn-shanghai:1234567890:topics/t", "region cn-hangzhou"),
        ("acs:mns:cn-hangzhou:1111111111:topics/t", "account 1234567890"),
    ],
)
def test_a_malformed_or_foreign_entry_is_refused(topic, why):
    with pytest.raises(ValueError, match=why):
        allowlist([topic], "https://1234567890.mns.cn-hangzhou.aliyuncs.com")
