"""`cfn-provider simulate`: a local stand-in for CloudFormation, for handler authors.

`simulate create TEMPLATE`, `simulate update [--template NEW]`, `simulate delete` drive a
template's custom resources through the real path: each request is published to an SNS topic,
delivered to an SQS queue, handled by the daemon (run in this process, on its own thread) and
answered through a presigned S3 URL; the answer is read back from S3 as CloudFormation would.
AWS is the stack's own moto server on 127.0.0.1 (a process kept from its create to its delete,
stack_emulator.py; `--seed` puts things there first, seed.py) unless `--endpoint` names another
AWS-compatible endpoint. Each custom resource's ServiceToken is replaced by the simulated topic.
The template is checked with cfn-lint before anything runs. The stack remembers the options its
operations share (remember.py: handlers, function settings, handler folders, endpoint, --poll-every).
A custom resource whose ServiceToken is `!GetAtt Fn.Arn` of the template's own AWS::Lambda::Function
is served by that function, with its Handler, code, environment, Timeout and MemorySize
(template_functions.py); `--handler` and `--function` override it.

CloudFormation's semantics, as far as custom resources see them:
- resources go in dependency order (one at a time: a valid CloudFormation order, not its
  parallelism); unchanged resources get no Update; scalars are sent as strings;
- Update carries OldResourceProperties; a changed PhysicalResourceId is a replacement, and the
  old id gets its Delete in the cleanup phase, after everything else succeeded;
- a failed Create rolls the stack back (Delete of everything created, the failed resource
  included, with the id its FAILED answer gave); a failed Update rolls back with an Update to the
  old properties (and Deletes of what the update created);
- no answer within the resource's ServiceTimeout (default 3600 s; `--wait-limit` caps the
  wait) fails the resource; its rollback Delete carries an id CloudFormation makes up;
- a Fn::GetAtt of an attribute the answer did not return fails the resource;
- DeletionPolicy / UpdateReplacePolicy Retain (and RetainExceptOnCreate) are honoured.

The simulated stack (id, template, parameters, resources with their ids, properties and
Data, outputs, events) lives in a JSON state file between invocations, written atomically.

The modules: state.py (the stack's state file), remember.py, console.py (what is printed),
daemon_log.py (the daemon's log: tracebacks kept for the summary), embedded.py and backend.py (the
daemon on its thread; the topic, queue and bucket; one request's round trip), stack_emulator.py,
seed.py, fast_polls.py (--poll-every), template_functions.py, steps.py (one resource's requests) and engine.py
(CloudFormation's ordering of create, update, delete and their rollbacks), session.py (one
invocation, its summary and exit status), served.py (the --handler types checked against the
template's before anything runs) and commands.py (the click group). Tests that must not os._exit() patch
session.HARD_EXIT_PAST_STUCK_HANDLERS.
"""

from __future__ import annotations

from .backend import Answer, Backend, Endpoint
from .commands import default_stack_name, load_template_or_fail, make_template, simulate
from .console import Console, Event
from .embedded import EmbeddedDaemon
from .engine import Engine
from .state import (
    COMPLETE,
    DEFAULT_SERVICE_TIMEOUT,
    DEFAULT_STATE_DIR,
    INTERRUPTED,
    STACK_TYPE,
    STATE_VERSION,
    UPDATABLE,
    Resource,
    SimulateError,
    StackState,
    read_state,
    write_state,
)
from .steps import generated_physical_id, service_timeout

__all__ = [
    "COMPLETE",
    "DEFAULT_SERVICE_TIMEOUT",
    "DEFAULT_STATE_DIR",
    "INTERRUPTED",
    "STACK_TYPE",
    "STATE_VERSION",
    "UPDATABLE",
    "Answer",
    "Backend",
    "Console",
    "EmbeddedDaemon",
    "Endpoint",
    "Engine",
    "Event",
    "Resource",
    "SimulateError",
    "StackState",
    "default_stack_name",
    "generated_physical_id",
    "load_template_or_fail",
    "make_template",
    "read_state",
    "service_timeout",
    "simulate",
    "write_state",
]
