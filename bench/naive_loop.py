"""What a user would write instead of the daemon: synchronous boto3, one message at a time.

    python -m bench.naive_loop --queue-url URL [--max-seconds 600]

receive (up to 10, long poll) -> for each message: parse, answer with requests.put, delete it.
Prints `ready`, then `answered 1` after each message (the bench counts them).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

import boto3
import requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--wait-seconds", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=600)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sqs = boto3.client("sqs")
    print("ready", flush=True)
    give_up = time.monotonic() + args.max_seconds
    while time.monotonic() < give_up:
        resp = sqs.receive_message(QueueUrl=args.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=args.wait_seconds)
        for message in resp.get("Messages", []):
            request = json.loads(json.loads(message["Body"])["Message"])
            body = json.dumps(
                {
                    "Status": "SUCCESS",
                    "PhysicalResourceId": f"{request['LogicalResourceId']}-{request['RequestId'][:8]}",
                    "StackId": request["StackId"],
                    "RequestId": request["RequestId"],
                    "LogicalResourceId": request["LogicalResourceId"],
                }
            )
            put = requests.put(request["ResponseURL"], data=body, headers={"Content-Type": ""}, timeout=30)
            if put.status_code != 200:
                print(f"error PUT {put.status_code}", flush=True)
            sqs.delete_message(QueueUrl=args.queue_url, ReceiptHandle=message["ReceiptHandle"])
            print("answered 1", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
