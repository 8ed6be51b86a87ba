"""Transports: the queue interface the pipeline consumes, over SQS or Alibaba MNS."""
