"""Transports: the queue interface the pipeline consumes, over SQS or Alibaba MNS."""

from typing import Literal, get_args

Transport = Literal["sqs", "mns", "web"]  # --transport (cfn_provider.config.Settings): where requests come from
TRANSPORTS: tuple[Transport, ...] = get_args(Transport)
