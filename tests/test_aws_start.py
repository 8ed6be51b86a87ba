"""cfn_provider.aws_start: the region `run` uses when none is given (the queue URL's, the topic ARN's),
and which starts need AWS at all. The refusals themselves run through the real CLI in
tests/test_cli_errors.py (the table of bad starts)."""

from __future__ import annotations

import pytest

from cfn_provider.aws_start import needs_aws, region_of_queue_url, region_of_topic_arn, resolve_region


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/cfn-provider", "eu-west-1"),
        ("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q", "cn-north-1"),
        ("https://sqs.us-gov-west-1.amazonaws.com/123456789012/q", "us-gov-west-1"),
        ("https://sqs.ap-southeast-2.api.aws/123456789012/q", "ap-southeast-2"),
        ("https://eu-central-1.queue.amazonaws.com/123456789012/q", "eu-central-1"),
        ("http://127.0.0.1:5000/123456789012/q", None),  # an emulator's
        ("https://sqs.eu-west-1.amazonaws.com.evil.example/1/q", None),
        ("https://sqs.amazonaws.com/1/q", None),
        ("not a url", None),
        (None, None),
    ],
)
def test_the_region_a_queue_url_names(url, region):
    assert region_of_queue_url(url) == region


def test_the_region_a_topic_arn_names():
    assert region_of_topic_arn("arn:aws:sns:eu-west-1:123456789012:cfn-provider") == "eu-west-1"
    assert region_of_topic_arn("arn:aws-cn:sns:cn-north-1:123456789012:t") == "cn-north-1"
    assert region_of_topic_arn("arn:aws:sqs:eu-west-1:1:q") is None and region_of_topic_arn("") is None


def test_given_then_the_environment_then_the_queue_url_then_the_topic_arn(monkeypatch, tmp_path):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    url, arns = "https://sqs.eu-west-1.amazonaws.com/1/q", ["x", "arn:aws:sns:ap-south-1:1:t"]
    assert resolve_region(None, url, arns) == "eu-west-1"
    assert resolve_region(None, "http://127.0.0.1:1/1/q", arns) == "ap-south-1"
    assert resolve_region(None, "http://127.0.0.1:1/1/q", []) is None
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    assert resolve_region(None, url, arns) == "us-west-2"
    monkeypatch.setenv("AWS_REGION", "us-east-2")
    assert resolve_region(None, url, arns) == "us-east-2"
    assert resolve_region("eu-north-1", url, arns) == "eu-north-1"


def test_only_the_sqs_transport_and_a_dynamodb_store_need_aws():
    assert needs_aws("sqs", "sqlite:///s.db") and needs_aws("web", "dynamodb://t")
    assert not needs_aws("web", "sqlite:///s.db") and not needs_aws("mns", "sqlite:///s.db")
