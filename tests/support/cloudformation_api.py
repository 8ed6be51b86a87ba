"""A real HTTP server standing in for CloudFormation's API, for stacks of SNS-backed custom resources.

moto's CloudFormation runs only Lambda-backed custom resources, so `cfn-provider invoke`'s default
path (a real stack) is tested against this: the query protocol botocore speaks (CreateStack,
DescribeStacks, DescribeStackEvents, DeleteStack; XML answers, ValidationError for an unknown
stack) on 127.0.0.1, and behind it what CloudFormation does with a Custom:: resource whose
ServiceToken is an SNS topic: each request published to the topic on the emulator, with a
presigned S3 PUT URL in a bucket of the emulator as its ResponseURL, the answer read back from
there; properties sent as strings; ServiceTimeout honoured (no answer: CREATE_FAILED, with
CloudFormation's wording); a failed Create rolled back with a Delete of the id its answer named
(ROLLBACK_COMPLETE, or ROLLBACK_FAILED when that Delete fails); a Delete answered FAILED (or not
at all) leaves the stack DELETE_FAILED. A FAILED answer's Reason is quoted as CloudFormation
quotes it. One resource per stack (what invoke makes).

    with CloudFormationApi(emulator) as cfn:      # AWS_ENDPOINT_URL_CLOUDFORMATION=cfn.endpoint
        ...
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from cfn_provider.local.emulator import ACCOUNT, REGION, Emulator, key_of

_NS = "http://cloudformation.amazonaws.com/doc/2010-05-15/"
NO_RESPONSE = (
    "CloudFormation did not receive a response from your Custom Resource. Please check your logs for "
    "requestId [{}]. If you are using the Python cfn-response module, you may need to update your "
    "Lambda function code so that CloudFormation can attach the updated version."
)


@dataclass
class _Stack:
    name: str
    stack_id: str
    logical_id: str
    resource_type: str
    properties: dict[str, Any]
    status: str = "CREATE_IN_PROGRESS"
    reason: str | None = None
    physical_id: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)  # oldest first


class CloudFormationApi:
    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.sns, self.s3 = emulator.client("sns"), emulator.client("s3")
        self.bucket = f"cfn-responses-{uuid.uuid4().hex[:10]}"
        self.s3.create_bucket(Bucket=self.bucket)
        self.stacks: dict[str, _Stack] = {}  # by StackId
        self.requests: list[dict[str, Any]] = []  # every request published, in order
        self._lock = threading.Lock()
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                form = {
                    k: v[0]
                    for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"] or 0)).decode()).items()
                }
                status, body = api.handle(form)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> CloudFormationApi:
        return self

    def __exit__(self, *_: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ the API
    def handle(self, form: dict[str, str]) -> tuple[int, str]:
        action = form.get("Action", "")
        if action == "CreateStack":
            return self._create(form)
        stack = self._find(form.get("StackName", ""))
        if stack is None:
            return 400, (
                f'<ErrorResponse xmlns="{_NS}"><Error><Type>Sender</Type><Code>ValidationError</Code>'
                f"<Message>Stack with id {escape(form.get('StackName', ''))} does not exist</Message>"
                "</Error><RequestId>x</RequestId></ErrorResponse>"
            )
        if action == "DescribeStacks":
            reason = f"<StackStatusReason>{escape(stack.reason)}</StackStatusReason>" if stack.reason else ""
            member = (
                f"<member><StackName>{stack.name}</StackName><StackId>{stack.stack_id}</StackId>"
                f"<CreationTime>{stack.events[0]['Timestamp']}</CreationTime>"
                f"<StackStatus>{stack.status}</StackStatus>{reason}</member>"
            )
            return 200, _answer(action, f"<Stacks>{member}</Stacks>")
        if action == "DescribeStackEvents":
            members = "".join(
                "<member>"
                + "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in e.items() if v is not None)
                + "</member>"
                for e in reversed(stack.events)
            )  # newest first, as CloudFormation
            return 200, _answer(action, f"<StackEvents>{members}</StackEvents>")
        if action == "DeleteStack":
            threading.Thread(target=self._delete, args=(stack,), daemon=True).start()
            return 200, _answer(action, "")
        return 400, f'<ErrorResponse xmlns="{_NS}"><Error><Code>InvalidAction</Code></Error></ErrorResponse>'

    def _find(self, name_or_id: str) -> _Stack | None:
        with self._lock:
            if name_or_id in self.stacks:
                return self.stacks[name_or_id]
            live = [s for s in self.stacks.values() if s.name == name_or_id and s.status != "DELETE_COMPLETE"]
            return live[0] if live else None

    def _create(self, form: dict[str, str]) -> tuple[int, str]:
        template = json.loads(form["TemplateBody"])
        [(logical_id, resource)] = template["Resources"].items()
        name = form["StackName"]
        stack_id = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{name}/{uuid.uuid4()}"
        stack = _Stack(name, stack_id, logical_id, resource["Type"], resource.get("Properties", {}))
        with self._lock:
            self.stacks[stack_id] = stack
        self._event(stack, None, "CREATE_IN_PROGRESS", "User Initiated")
        threading.Thread(target=self._run_create, args=(stack,), daemon=True).start()
        return 200, _answer("CreateStack", f"<StackId>{stack_id}</StackId>")

    # ------------------------------------------------------------------ what CloudFormation does
    def _run_create(self, stack: _Stack) -> None:
        self._event(stack, stack.logical_id, "CREATE_IN_PROGRESS")
        answer, request_id = self._request(stack, "Create")
        if answer is not None and answer.get("Status") == "SUCCESS":
            stack.physical_id = answer.get("PhysicalResourceId")
            self._event(stack, stack.logical_id, "CREATE_COMPLETE")
            self._event(stack, None, "CREATE_COMPLETE")
            return
        stack.physical_id = (answer or {}).get("PhysicalResourceId") or request_id
        self._event(stack, stack.logical_id, "CREATE_FAILED", self._failure(answer, request_id))
        self._event(
            stack,
            None,
            "ROLLBACK_IN_PROGRESS",
            f"The following resource(s) failed to create: [{stack.logical_id}]. Rollback requested by user.",
        )
        ok = self._remove(stack)
        self._event(stack, None, "ROLLBACK_COMPLETE" if ok else "ROLLBACK_FAILED")

    def _delete(self, stack: _Stack) -> None:
        was = stack.status
        self._event(stack, None, "DELETE_IN_PROGRESS", "User Initiated")
        if was in ("CREATE_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED") and not self._remove(stack):
            self._event(
                stack, None, "DELETE_FAILED", f"The following resource(s) failed to delete: [{stack.logical_id}]."
            )
            return
        self._event(stack, None, "DELETE_COMPLETE")

    def _remove(self, stack: _Stack) -> bool:
        """The resource's Delete: True when it was answered SUCCESS."""
        self._event(stack, stack.logical_id, "DELETE_IN_PROGRESS")
        answer, request_id = self._request(stack, "Delete")
        if answer is not None and answer.get("Status") == "SUCCESS":
            self._event(stack, stack.logical_id, "DELETE_COMPLETE")
            return True
        self._event(stack, stack.logical_id, "DELETE_FAILED", self._failure(answer, request_id))
        return False

    def _request(self, stack: _Stack, request_type: str) -> tuple[dict[str, Any] | None, str]:
        request_id = str(uuid.uuid4())
        props = {k: v if isinstance(v, (dict, list)) else str(v) for k, v in stack.properties.items()}
        url = self.s3.generate_presigned_url(
            "put_object", Params={"Bucket": self.bucket, "Key": f"{stack.name}/{request_id}"}, ExpiresIn=7200
        )
        request: dict[str, Any] = {
            "RequestType": request_type,
            "ServiceToken": props["ServiceToken"],
            "ResponseURL": url,
            "StackId": stack.stack_id,
            "RequestId": request_id,
            "LogicalResourceId": stack.logical_id,
            "ResourceType": stack.resource_type,
            "ResourceProperties": props,
        }
        if request_type != "Create":
            request["PhysicalResourceId"] = stack.physical_id
        self.requests.append(request)
        self.sns.publish(TopicArn=props["ServiceToken"], Message=json.dumps(request))
        bucket, key = key_of(url)
        deadline = time.monotonic() + int(props.get("ServiceTimeout", 3600))
        while time.monotonic() < deadline:
            try:
                return json.loads(self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()), request_id
            except self.s3.exceptions.NoSuchKey:
                time.sleep(0.1)
        return None, request_id

    @staticmethod
    def _failure(answer: dict[str, Any] | None, request_id: str) -> str:
        if answer is None:
            return NO_RESPONSE.format(request_id)
        return (
            f"Received response status [{answer.get('Status')}] from custom resource. Message returned: "
            f"{answer.get('Reason', '')} (RequestId: {request_id})"
        )

    def _event(self, stack: _Stack, logical_id: str | None, status: str, reason: str | None = None) -> None:
        resource = logical_id is not None
        with self._lock:
            stack.events.append(
                {
                    "StackId": stack.stack_id,
                    "EventId": str(uuid.uuid4()),
                    "StackName": stack.name,
                    "LogicalResourceId": logical_id or stack.name,
                    "PhysicalResourceId": (stack.physical_id or "") if resource else stack.stack_id,
                    "ResourceType": stack.resource_type if resource else "AWS::CloudFormation::Stack",
                    "Timestamp": dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z"),
                    "ResourceStatus": status,
                    "ResourceStatusReason": reason,
                }
            )
            if not resource:
                stack.status, stack.reason = status, reason


def _answer(action: str, inner: str) -> str:
    return (
        f'<{action}Response xmlns="{_NS}"><{action}Result>{inner}</{action}Result>'
        f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata></{action}Response>"
    )
