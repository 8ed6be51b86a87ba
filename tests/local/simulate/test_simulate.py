"""`cfn-provider simulate` end to end: each request goes SNS -> SQS -> the daemon -> a presigned
S3 URL on a real moto server (the session's, through --endpoint; once the embedded one), and the
events, outputs, exit codes and state file are what CloudFormation's semantics call for."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.local import handlers as sim_handlers

ECHO = """\
    Parameters:
      Colour: {Type: String, Default: blue}
      ThingName: {Type: String, Default: thing-a}
    Resources:
      Thing:
        Type: Custom::Echo
        Properties:
          ServiceToken: arn:aws:sns:eu-west-1:111111111111:not-this-one
          Name: !Ref ThingName
          Colour: !Ref Colour
          Size: 3
      Label:
        Type: Custom::Echo
        Properties:
          ServiceToken: !ImportValue provider-ServiceToken
          Text: !Sub "${Thing.Colour} ${Thing} in ${AWS::Region}"
    Outputs:
      ThingId: {Value: !Ref Thing}
      Colour: {Value: !GetAtt Thing.Colour}
      Size: {Value: !GetAtt [Thing, Size]}
      Text: {Value: !GetAtt Label.Text, Export: {Name: !Sub "${AWS::StackName}-text"}}
"""

RECORDED = """\
    Parameters:
      Colour: {Type: String, Default: blue}
      AName: {Type: String, Default: a-1}
      BFail: {Type: String, Default: ""}
    Conditions:
      BFails: !Not [!Equals [!Ref BFail, ""]]
    Resources:
      A:
        Type: Custom::Recorded
        Properties:
          ServiceToken: x
          Name: !Ref AName
          Colour: !Ref Colour
      B:
        Type: Custom::Recorded
        Properties:
          ServiceToken: x
          Name: b-1
          FromA: !GetAtt A.Colour
          FailWith: !If [BFails, !Ref BFail, !Ref AWS::NoValue]
"""


def statuses(run, logical_id=None):
    return [(lid, status) for lid, status, _, _ in run.events() if logical_id in (None, lid)]


def test_create_prints_outputs_and_keeps_state_between_invocations(sim, write):
    path = write("echo.yaml", ECHO)
    run = sim("create", path)
    assert run.code == 0, run
    # outputs through Ref and Fn::GetAtt (both forms), Sub of ${Res.Attr}, ${Res} and ${AWS::Region}
    assert "Stack s: CREATE_COMPLETE" in run.stdout
    lines = run.stdout.splitlines()
    assert any(line.split() == ["ThingId", "thing-a"] for line in lines), run
    assert any(line.split() == ["Colour", "blue"] for line in lines), run
    assert any(line.split() == ["Size", "3"] for line in lines), run  # scalars are sent as strings
    assert any(
        line.split()[:5] == ["Text", "blue", "thing-a", "in", "us-east-1"] and "(Export: s-text)" in line
        for line in lines
    ), run
    # events as describe-stack-events shows them, in order
    assert statuses(run) == [
        ("s", "CREATE_IN_PROGRESS"),
        ("Thing", "CREATE_IN_PROGRESS"),
        ("Thing", "CREATE_IN_PROGRESS"),
        ("Thing", "CREATE_COMPLETE"),
        ("Label", "CREATE_IN_PROGRESS"),
        ("Label", "CREATE_IN_PROGRESS"),
        ("Label", "CREATE_COMPLETE"),
        ("s", "CREATE_COMPLETE"),
    ]
    assert "Resource creation Initiated" in run.stdout and "CREATE_COMPLETE" in run.stdout
    # the ServiceTokens (a foreign topic, an import) were replaced, and it says so
    assert "ServiceToken of Thing, Label replaced by the simulated topic" in run.stderr
    assert "ImportValue" not in run.stderr  # never resolved: replaced wholesale

    state = run.state
    stack_id = state["StackId"]
    assert stack_id.startswith("arn:aws:cloudformation:us-east-1:") and "/s/" in stack_id
    assert state["StackStatus"] == "CREATE_COMPLETE"
    assert state["Resources"]["Thing"]["PhysicalResourceId"] == "thing-a"
    assert state["Resources"]["Thing"]["Data"] == {"Colour": "blue", "Size": "3"}
    assert state["Outputs"]["Text"] == {"Value": "blue thing-a in us-east-1", "ExportName": "s-text"}

    # a second invocation (a new emulator queue, a new daemon) finds the stack in the state file
    again = sim("update", "--parameter", "Colour=green")
    assert again.code == 0, again
    assert again.state["StackId"] == stack_id
    assert any(
        line.split() == ["Text", "green", "thing-a", "in", "us-east-1", "(Export:", "s-text)"]
        for line in again.stdout.splitlines()
    ), again
    # and create refuses to make it twice
    twice = sim("create", path)
    assert twice.code == 2 and "Stack [s] already exists" in twice.stderr, twice


def test_update_in_place_sends_old_properties_and_skips_unchanged_resources(sim, write):
    path = write("rec.yaml", RECORDED)
    assert sim("create", path).code == 0
    sim_handlers.requests.clear()
    run = sim("update", "--parameter", "Colour=green")
    assert run.code == 0, run
    a_update, b_update = [r for r in sim_handlers.requests if r["RequestType"] == "Update"]
    assert a_update["LogicalResourceId"] == "A" and a_update["PhysicalResourceId"] == "a-1"
    assert a_update["ResourceProperties"]["Colour"] == "green"
    assert a_update["OldResourceProperties"]["Colour"] == "blue"
    assert a_update["ResourceProperties"]["ServiceToken"] == a_update["OldResourceProperties"]["ServiceToken"]
    assert b_update["ResourceProperties"]["FromA"] == "green"  # resolved after A's update
    assert b_update["OldResourceProperties"]["FromA"] == "blue"
    assert statuses(run) == [
        ("s", "UPDATE_IN_PROGRESS"),
        ("A", "UPDATE_IN_PROGRESS"),
        ("A", "UPDATE_COMPLETE"),
        ("B", "UPDATE_IN_PROGRESS"),
        ("B", "UPDATE_COMPLETE"),
        ("s", "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS"),
        ("s", "UPDATE_COMPLETE"),
    ]
    # nothing changed: no request at all, as CloudFormation
    sim_handlers.requests.clear()
    same = sim("update")
    assert same.code == 0 and "No updates are to be performed." in same.stdout, same
    assert sim_handlers.requests == []


def test_update_with_replacement_deletes_the_old_id_in_cleanup(sim, write):
    path = write("echo.yaml", ECHO)
    assert sim("create", path).code == 0
    run = sim("update", "--template", path, "--parameter", "ThingName=thing-b")
    assert run.code == 0, run
    events = run.events()
    assert (
        "Thing",
        "UPDATE_IN_PROGRESS",
        "thing-b",
        "Requested update required the provider to create a new physical resource",
    ) in events
    order = [(lid, status, pid) for lid, status, pid, _ in events]
    cleanup = order.index(("s", "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", run.state["StackId"]))
    assert order.index(("Thing", "UPDATE_COMPLETE", "thing-b")) < cleanup
    label_id = run.state["Resources"]["Label"]["PhysicalResourceId"]
    assert order.index(("Label", "UPDATE_COMPLETE", label_id)) < cleanup  # its Text has Thing's id: updated too
    assert order[cleanup + 1 :] == [
        ("Thing", "DELETE_IN_PROGRESS", "thing-a"),
        ("Thing", "DELETE_COMPLETE", "thing-a"),
        ("s", "UPDATE_COMPLETE", run.state["StackId"]),
    ]
    assert run.state["Resources"]["Thing"]["PhysicalResourceId"] == "thing-b"
    assert run.state["Outputs"]["ThingId"]["Value"] == "thing-b"


def test_failed_create_rolls_back_with_a_delete(sim, write):
    path = write(
        "fail.yaml",
        """\
        Resources:
          Good:
            Type: Custom::Echo
            Properties: {ServiceToken: x, Name: good-1}
          Bad:
            Type: Custom::Test
            DependsOn: Good
            Properties: {ServiceToken: x, Raise: the handler says no}
    """,
    )
    run = sim("create", path)
    assert run.code == 1, run
    events = run.events()
    failed = [e for e in events if e[1] == "CREATE_FAILED"]
    assert len(failed) == 1 and failed[0][0] == "Bad"
    assert failed[0][3].startswith(
        "Received response status [FAILED] from custom resource. "
        "Message returned: RuntimeError: the handler says no (traceback in the "
        "provider's log: handler.raised) (RequestId: "
    )
    marker = failed[0][2]
    assert marker.startswith("cfn-provider-failed-create-")
    assert (
        "s",
        "ROLLBACK_IN_PROGRESS",
        run.state["StackId"],
        "The following resource(s) failed to create: [Bad]. Rollback requested by user.",
    ) in events
    rollback = [(lid, status, pid) for lid, status, pid, _ in events[events.index(failed[0]) + 2 :]]
    assert rollback == [
        ("Bad", "DELETE_IN_PROGRESS", marker),
        ("Bad", "DELETE_COMPLETE", marker),  # answered via the marker
        ("Good", "DELETE_IN_PROGRESS", "good-1"),
        ("Good", "DELETE_COMPLETE", "good-1"),
        ("s", "ROLLBACK_COMPLETE", run.state["StackId"]),
    ]
    assert "Stack s: ROLLBACK_COMPLETE" in run.stdout
    assert run.state["Resources"] == {}
    # as in CloudFormation, a ROLLBACK_COMPLETE stack can only be deleted
    assert sim("update").code == 2
    again = sim("create", path)
    assert again.code == 2 and "can only be deleted" in again.stderr
    gone = sim("delete")
    assert gone.code == 0 and "DELETE_COMPLETE" in gone.stdout, gone
    assert not gone.state_path.exists()


def test_failed_update_rolls_back_with_an_update_to_the_old_properties(sim, write):
    path = write("rec.yaml", RECORDED)
    assert sim("create", path).code == 0
    sim_handlers.requests.clear()
    # A is replaced (new Name), then B fails: both roll back
    run = sim("update", "--parameter", "AName=a-2", "--parameter", "BFail=B refuses")
    assert run.code == 1, run
    assert "Stack s: UPDATE_ROLLBACK_COMPLETE" in run.stdout
    wire = [
        (
            r["RequestType"],
            r["LogicalResourceId"],
            r.get("PhysicalResourceId"),
            r["ResourceProperties"].get("Name"),
            (r.get("OldResourceProperties") or {}).get("Name"),
        )
        for r in sim_handlers.requests
    ]
    assert wire == [
        ("Update", "A", "a-1", "a-2", "a-1"),  # forward: a replacement
        ("Update", "B", "b-1", "b-1", "b-1"),  # forward: fails
        ("Update", "B", "b-1", "b-1", "b-1"),  # rollback: the old properties again
        ("Update", "A", "a-2", "a-1", "a-2"),  # rollback: old properties, to the id it has now
        ("Delete", "A", "a-2", "a-2", None),  # rollback cleanup: the replacement made by the update
    ]
    b_rollback = sim_handlers.requests[2]
    assert "FailWith" not in b_rollback["ResourceProperties"]
    assert b_rollback["OldResourceProperties"]["FailWith"] == "B refuses"
    events = run.events()
    assert (
        "s",
        "UPDATE_ROLLBACK_IN_PROGRESS",
        run.state["StackId"],
        "The following resource(s) failed to update: [B].",
    ) in events
    assert [e[1] for e in events if e[0] == "s"] == [
        "UPDATE_IN_PROGRESS",
        "UPDATE_ROLLBACK_IN_PROGRESS",
        "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS",
        "UPDATE_ROLLBACK_COMPLETE",
    ]
    failed = [e for e in events if e[1] == "UPDATE_FAILED"]
    assert [e[0] for e in failed] == ["B"] and "Message returned: B refuses" in failed[0][
        3
    ]  # FailWith: the message alone
    state = run.state
    assert state["StackStatus"] == "UPDATE_ROLLBACK_COMPLETE"
    assert state["Resources"]["A"]["PhysicalResourceId"] == "a-1"
    assert state["Resources"]["A"]["Properties"]["Name"] == "a-1"
    assert state["ParameterOverrides"] == {}  # the old parameters stay
    # UPDATE_ROLLBACK_COMPLETE can be updated again; then deleted in reverse dependency order
    sim_handlers.requests.clear()
    assert sim("update", "--parameter", "Colour=red").code == 0
    gone = sim("delete")
    assert gone.code == 0, gone
    deletes = [
        (r["LogicalResourceId"], r["PhysicalResourceId"]) for r in sim_handlers.requests if r["RequestType"] == "Delete"
    ]
    assert deletes == [("B", "b-1"), ("A", "a-1")]


def test_handler_overrunning_its_service_timeout_is_answered_failed_by_the_daemon(sim, write):
    path = write(
        "slow.yaml",
        """\
        Resources:
          Sleepy:
            Type: Custom::Slow
            Properties: {ServiceToken: x, ServiceTimeout: 20, CreateSeconds: 22}
    """,
    )
    # ServiceTimeout 20: the daemon keeps back 2 s (runner.response_margin) to store and PUT the
    # answer; a loaded CI machine (an fsync, moto) once took more than the 1 s kept back of 5 s
    started = time.monotonic()
    run = sim("create", path)
    assert run.code == 1, run
    assert time.monotonic() - started < 60  # a hang guard: about 20 s here
    failed = [e for e in run.events() if e[1] == "CREATE_FAILED"]
    # the handler got all but the margin of what was left when it started (less under load)
    timed_out = re.search(r"Message returned: timed out after (\d+) s \(RequestId: ", failed[0][3])
    assert timed_out and 12 <= int(timed_out[1]) <= 18, run
    assert run.state["StackStatus"] == "ROLLBACK_COMPLETE"


def test_rollback_of_a_create_cut_short_reaches_the_handlers_delete_with_its_properties(sim, write):
    # the daemon answered a timed-out Create with its timed-out marker; CloudFormation's rollback
    # Delete carries that id and the Create's properties, and the daemon passes it to `delete`.
    # ServiceTimeout 20: the daemon's 2 s margin must survive a loaded machine (with 2 s and 5 s
    # ServiceTimeouts, 0.5 s and 1 s margins, it once did not)
    path = write(
        "cut.yaml",
        """\
        Resources:
          Cut:
            Type: Custom::Slow
            Properties: {ServiceToken: x, ServiceTimeout: 20, CreateSeconds: 22, Name: cut-1}
    """,
    )
    run = sim("create", path)
    assert run.code == 1, run
    failed = [e for e in run.events() if e[1] == "CREATE_FAILED"]
    marker = failed[0][2]
    assert marker.startswith("cfn-provider-timed-out-"), run
    deletes = [(e[1], e[2]) for e in run.events() if e[0] == "Cut" and e[1].startswith("DELETE")]
    assert deletes == [("DELETE_IN_PROGRESS", marker), ("DELETE_COMPLETE", marker)]
    assert [
        (r["RequestType"], r["PhysicalResourceId"], r["ResourceProperties"].get("Name")) for r in sim_handlers.requests
    ] == [("Delete", marker, "cut-1")]
    assert run.state["StackStatus"] == "ROLLBACK_COMPLETE"


def test_missing_response_is_reported_as_cloudformation_would(sim, write):
    # an async handler that blocks the daemon's event loop: the daemon cannot answer in time
    path = write(
        "blocked.yaml",
        """\
        Resources:
          Stuck:
            Type: Custom::Slow
            Properties: {ServiceToken: x, ServiceTimeout: 3, CreateSeconds: 3.5, Block: true}
    """,
    )
    started = time.monotonic()
    run = sim("create", path)
    assert run.code == 1, run
    failed = [e for e in run.events() if e[1] == "CREATE_FAILED"]
    assert failed[0][3].startswith(
        "Failed to receive a response from the custom resource within 3 seconds (ServiceTimeout)"
    ), run
    assert failed[0][2] == ""  # CloudFormation never got an id ...
    deletes = [e for e in run.events() if e[0] == "Stuck" and e[1].startswith("DELETE")]
    generated = deletes[0][2]
    assert generated.startswith("s-Stuck-")  # ... so its rollback Delete carries one it made up
    assert [e[1] for e in deletes] == ["DELETE_IN_PROGRESS", "DELETE_COMPLETE"]
    assert [(r["RequestType"], r["PhysicalResourceId"]) for r in sim_handlers.requests] == [("Delete", generated)]
    assert run.state["StackStatus"] == "ROLLBACK_COMPLETE"
    assert time.monotonic() - started < 15


def test_wait_limit_caps_the_wait(sim, write):
    path = write(
        "slow.yaml",
        """\
        Resources:
          Slow:
            Type: Custom::Slow
            Properties: {ServiceToken: x, CreateSeconds: 3}
    """,
    )
    started = time.monotonic()
    run = sim("create", path, "--wait-limit", "1")
    assert run.code == 1, run
    failed = [e for e in run.events() if e[1] == "CREATE_FAILED"]
    assert (
        "No response from the custom resource within 1 seconds (--wait-limit; CloudFormation would wait up "
        "to the ServiceTimeout of 3600 seconds)" in failed[0][3]
    ), run
    assert time.monotonic() - started < 10


def test_update_adds_and_removes_resources_and_honours_retain(sim, write):
    v1 = write(
        "v1.yaml",
        """\
        Resources:
          Old:
            Type: Custom::Recorded
            Properties: {ServiceToken: x, Name: old-1}
          Kept:
            Type: Custom::Recorded
            DeletionPolicy: Retain
            Properties: {ServiceToken: x, Name: kept-1}
    """,
    )
    v2 = write(
        "v2.yaml",
        """\
        Resources:
          Kept:
            Type: Custom::Recorded
            DeletionPolicy: Retain
            Properties: {ServiceToken: x, Name: kept-1}
          New:
            Type: Custom::Recorded
            Properties: {ServiceToken: x, Name: new-1, Peer: !Ref Kept}
    """,
    )
    assert sim("create", v1).code == 0
    sim_handlers.requests.clear()
    run = sim("update", "--template", v2)
    assert run.code == 0, run
    assert [(r["RequestType"], r["LogicalResourceId"]) for r in sim_handlers.requests] == [
        ("Create", "New"),
        ("Delete", "Old"),
    ]  # the removed resource goes in the cleanup phase
    assert set(run.state["Resources"]) == {"Kept", "New"}
    sim_handlers.requests.clear()
    gone = sim("delete")
    assert gone.code == 0, gone
    assert [(r["RequestType"], r["LogicalResourceId"]) for r in sim_handlers.requests] == [("Delete", "New")]
    assert "DELETE_SKIPPED" in gone.stdout  # Kept: DeletionPolicy Retain


def test_getatt_of_an_attribute_the_handler_did_not_return_fails_the_resource(sim, write):
    path = write(
        "attr.yaml",
        """\
        Resources:
          Thing:
            Type: Custom::Echo
            Properties: {ServiceToken: x, Colour: blue}
        Outputs:
          Missing: {Value: !GetAtt Thing.Shape}
    """,
    )
    run = sim("create", path)
    assert run.code == 1, run
    failed = [e for e in run.events() if e[1] == "CREATE_FAILED"]
    assert failed[0][0] == "Thing"
    assert failed[0][3].startswith("CustomResource attribute error: Vendor response doesn't contain Shape key")
    # it was created, so the rollback deletes it with its real id
    assert ("Thing", "DELETE_COMPLETE", failed[0][2], "") in run.events()


def test_other_resources_are_not_created_and_resolve_to_placeholders(sim, write):
    path = write(
        "mixed.yaml",
        """\
        Resources:
          Bucket:
            Type: AWS::S3::Bucket
          Thing:
            Type: Custom::Echo
            Properties: {ServiceToken: x, Where: !Ref Bucket, Arn: !GetAtt Bucket.Arn}
        Outputs:
          Where: {Value: !GetAtt Thing.Where}
    """,
    )
    run = sim("create", path)
    assert run.code == 0, run
    assert "Bucket (AWS::S3::Bucket) is not a custom resource: simulate does not create it" in run.stderr
    assert "Ref Bucket -> 'placeholder-Bucket'" in run.stderr
    assert run.state["Resources"]["Thing"]["Data"] == {"Where": "placeholder-Bucket", "Arn": "placeholder-Bucket.Arn"}
    assert "Bucket" not in {e[0] for e in run.events()}


def test_template_and_state_errors_exit_2_before_anything_runs(sim, write, tmp_path):
    cyclic = write(
        "cycle.yaml",
        """\
        Resources:
          A: {Type: Custom::Echo, Properties: {ServiceToken: x, Peer: !Ref B}}
          B: {Type: Custom::Echo, Properties: {ServiceToken: x, Peer: !GetAtt A.Peer}}
    """,
    )
    run = sim("create", cyclic)
    # cfn-lint finds it first, with the file and line
    assert run.code == 2 and "cycle.yaml:2:3: E3004 Circular Dependencies for resource A" in run.stderr, run
    assert not run.state_path.exists()
    missing = write(
        "param.yaml",
        """\
        Parameters: {Size: {Type: Number}}
        Resources:
          A: {Type: Custom::Echo, Properties: {ServiceToken: x, Size: !Ref Size}}
    """,
    )
    run = sim("create", missing)
    assert run.code == 2 and "Parameters: [Size] must have values" in run.stderr, run
    assert sim("update").code == 2  # no such stack
    nothing = sim("delete")
    assert nothing.code == 0 and "nothing to delete" in nothing.stdout, nothing


def test_embedded_emulator_runs_the_example_consumer_template(sim):
    template = str(Path(__file__).resolve().parents[3] / "deploy" / "example-consumer.yaml")
    run = sim("create", template, embedded=True, stack="consumer")
    assert run.code == 0, run
    assert "the stack's AWS emulator (moto, pid " in run.stderr
    outputs = run.state["Outputs"]
    assert outputs["QuickName"]["Value"] == "consumer-quick"
    assert outputs["QuickDepends"]["Value"] == "blue" and outputs["Size"]["Value"] == "3"
    gone = sim("delete", embedded=True, stack="consumer")
    assert gone.code == 0, gone
    deleted = [line.split()[1] for line in gone.stdout.splitlines() if line[:4].isdigit() and "DELETE_COMPLETE" in line]
    assert deleted == ["Quick", "Thing", "consumer"]  # Quick depends on Thing: it goes first
    assert not gone.state_path.exists()


def test_noecho_data_is_masked_in_outputs(sim, write):
    path = write(
        "secret.yaml",
        """\
        Resources:
          Secret:
            Type: Custom::Test
            Properties:
              ServiceToken: x
              ReturnJson: '{"PhysicalResourceId": "secret-1", "Data": {"Password": "hunter2"}, "NoEcho": true}'
        Outputs:
          Password: {Value: !GetAtt Secret.Password}
          Id: {Value: !Ref Secret}
    """,
    )
    run = sim("create", path)
    assert run.code == 0, run
    assert "hunter2" not in run.stdout
    assert run.state["Outputs"] == {"Password": {"Value": "****"}, "Id": {"Value": "secret-1"}}


def test_a_handler_that_does_not_load_is_an_error_before_anything_runs(sim, write):
    path = write("echo.yaml", ECHO)
    run = sim("create", path, "--handler", "Custom::Nope=no_such_module_here")
    assert run.code == 2 and "no_such_module_here" in run.stderr, run
    assert not run.state_path.exists()


def test_a_long_running_resource_shows_its_progress_as_in_progress_events(sim, write):
    path = write(
        "poll.yaml",
        """\
        Resources:
          Snapshot:
            Type: Custom::Poll
            Properties: {ServiceToken: x, Polls: 3, AfterSeconds: 1}
    """,
    )
    run = sim("create", path, "--handler", "Custom::Poll=tests.support.polling_handlers")
    assert run.code == 0, run
    events = [e for e in run.events() if e[0] == "Snapshot"]
    progress = [e for e in events if e[1] == "CREATE_IN_PROGRESS" and e[3].startswith("Long-running Create")]
    assert len(progress) >= 2, events
    assert progress[0][2].startswith("op-")  # the id the action gave, before the answer
    assert '{"polls":1}' in " ".join(e[3] for e in progress), progress
    assert events[-1][1] == "CREATE_COMPLETE" and events[-1][2] == progress[0][2]
