"""A command for Custom::Command tests: `python command_script.py ACTION [ARGS...]`.

Records what it was given (argv, stdin, environment) in $RECORD_DIR/<RequestId>.<action>.json,
then behaves as the request's ResourceProperties say:
  Fail: "N"        print a few lines on stderr and exit N
  Sleep: "S"       start a grandchild that sleeps, record its pid, sleep S seconds
  LeaveBehind: "1" start a grandchild that sleeps (a forgotten `cmd &`), record its pid, exit at once
  IgnoreTerm: "1"  ignore SIGTERM (the handler must follow up with SIGKILL)
  Print: "text"    print exactly this on stdout
  Spam: "N"        print N bytes on stdout
otherwise print {"PhysicalResourceId": "cmd-<Name>", "Data": {...}}.
"""

import json
import os
import signal
import subprocess
import sys
import time

action = sys.argv[1] if len(sys.argv) > 1 else "?"
event = json.loads(sys.stdin.read() or "{}")
props = event.get("ResourceProperties", {})
record = {"argv": sys.argv[1:], "stdin": event, "env": dict(os.environ), "action": action}
path = os.path.join(os.environ["RECORD_DIR"], f"{event.get('RequestId')}.{action}.json")


def save() -> None:
    with open(path + ".tmp", "w") as fh:
        json.dump(record, fh)
    os.replace(path + ".tmp", path)


if props.get("IgnoreTerm"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if props.get("LeaveBehind"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    record["grandchild"] = child.pid
if props.get("Sleep"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    record["grandchild"] = child.pid
    save()
    time.sleep(float(props["Sleep"]))
save()

if props.get("Fail"):
    for i in range(15):
        print(f"progress line {i}", file=sys.stderr)
    print("error: the zone does not exist", file=sys.stderr)
    sys.exit(int(props["Fail"]))
if "Print" in props:
    sys.stdout.write(props["Print"])
    sys.exit(0)
if props.get("Spam"):
    sys.stdout.write("x" * int(props["Spam"]))
    sys.exit(0)
print(
    json.dumps(
        {
            "PhysicalResourceId": f"cmd-{props.get('Name', 'x')}",
            "Data": {"Action": action, "Name": props.get("Name"), "Replacement": os.environ.get("CFN_REPLACEMENT", "")},
        }
    )
)
