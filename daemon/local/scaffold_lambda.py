"""`cfn-provider init NAME --template lambda`: a Lambda-style custom resource function (cfnresponse), as
it would be written for Lambda, served unchanged by `cfn-provider run --handler TYPE=lambda:index.handler`.

    NAME/
      README.md                 how to test, try and serve it
      template.yaml             a stack using the resource
      function/index.py         handler(event, context), answering with cfnresponse.send
      tests/test_function.py    create -> update -> delete, each event through `cfn-provider local-invoke`
      .gitignore
"""

from __future__ import annotations

INDEX = '''\
"""{rtype}: a custom resource function written for Lambda (cfnresponse), served unchanged by
cfn-provider (`--handler '{rtype}=lambda:index.handler' --function '{rtype}=code=function'`).

Replace the body of each branch with what your resource does. Properties: Name (a string).
Attribute: Greeting. The PhysicalResourceId is whatever a template author writes on Update and
Delete: act only on what your Create made (docs/handlers.md, "Holding the trust line").
"""
import cfnresponse


def handler(event, context):
    props = event["ResourceProperties"]
    try:
        if event["RequestType"] == "Delete":
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {{}}, event["PhysicalResourceId"])
            return
        name = props.get("Name", "world")
        physical_id = event.get("PhysicalResourceId") or "{name}-" + event["LogicalResourceId"]
        cfnresponse.send(event, context, cfnresponse.SUCCESS, {{"Greeting": "hello " + name}}, physical_id)
    except Exception as exc:  # never leave the stack waiting: answer FAILED
        cfnresponse.send(event, context, cfnresponse.FAILED, {{}}, event.get("PhysicalResourceId"), reason=str(exc))
'''

TEMPLATE = """\
Resources:
  Greeting:
    Type: {rtype}
    Properties:
      ServiceToken: !ImportValue cfn-provider-ServiceToken
      Name: world
Outputs:
  Greeting:
    Value: !GetAtt Greeting.Greeting
"""

TEST = '''\
"""The function's create -> update -> delete, each event made by `cfn-provider event` and run by
`cfn-provider local-invoke`, exactly as the daemon runs it (no stack, no daemon)."""
import json
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
RTYPE = "{rtype}"
SERVE = ["--handler", RTYPE + "=lambda:index.handler", "--function", RTYPE + "=code=" + str(PROJECT / "function")]


def cfn_provider(*args, stdin=None):
    done = subprocess.run(
        [sys.executable, "-m", "cfn_provider", *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout


def answer(*event_args):
    code, event = cfn_provider("event", *event_args)
    assert code == 0, event
    code, out = cfn_provider("local-invoke", "-", *SERVE, stdin=event)
    return code, json.loads(out)


def test_create_update_delete():
    code, created = answer("create", RTYPE, "--property", "Name=world")
    assert code == 0 and created["Status"] == "SUCCESS", created
    assert created["Data"] == {{"Greeting": "hello world"}}
    physical_id = created["PhysicalResourceId"]
    code, updated = answer(
        "update", RTYPE, "--property", "Name=there", "--old-property", "Name=world", "--physical-id", physical_id
    )
    assert code == 0 and updated["Data"] == {{"Greeting": "hello there"}}
    assert updated["PhysicalResourceId"] == physical_id
    code, deleted = answer("delete", RTYPE, "--physical-id", physical_id)
    assert code == 0 and deleted["Status"] == "SUCCESS"
'''

README = """\
# {name}

`{rtype}`: a custom resource function written as for Lambda (cfnresponse), served by cfn-provider.

```sh
pytest                                              # create -> update -> delete through local-invoke
cfn-provider event create {rtype} --property Name=you | \\
  cfn-provider local-invoke - --handler '{rtype}=lambda:index.handler' --function '{rtype}=code=function'
cfn-provider run --queue-url ... --topic-arn ... \\
  --handler '{rtype}=lambda:index.handler' --function '{rtype}=code=/opt/{name}/function'
```
"""

GITIGNORE = """\
.cfn-simulate/
__pycache__/
.venv/
"""

FILES = {
    "README.md": README,
    "template.yaml": TEMPLATE,
    "function/index.py": INDEX,
    "tests/test_function.py": TEST,
    ".gitignore": GITIGNORE,
}
