"""An `fc:` function (Alibaba Function Compute's) as a daemon handler: served exactly as a `lambda:` function is.

FcFunction is a LambdaFunction (cfn_provider.functions.function: its pools, its loopback answer
capture, how a call ends and what each ending answers) whose processes run Function Compute's
runtime (cfn_provider.functions.fc_runtime) with FC's environment and context
(cfn_provider.functions.fc_context). Its ResponseURL and IntranetResponseURL are both the call's
loopback capture URL, so whatever it POSTs (ROS's answer body) is its answer; the real URLs never
reach it. Its log lines carry the call's FC request id as `fc_request_id`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .fc_context import fc_context, fc_environment
from .function import FunctionTarget, LambdaFunction
from .host import FunctionHost
from .process import FunctionProcess, Setup, log_stream_name

FC_RUNTIME = str(Path(__file__).with_name("fc_runtime.py"))
START_TIMEOUT = 60.0  # seconds a process gets to import the function


class FcSetup(Setup):
    """The FC runtime's set-up line: a `lambda:` runtime's, and the Initializer (MODULE.FUNCTION or None)."""

    initializer: str | None


class FcTarget(FunctionTarget):
    """A registered `fc:` function, as cfn_provider.functions.fc_target found it."""

    def init(self, check: bool = False) -> FcSetup:
        return FcSetup(**super().init(check), initializer=self.settings.initializer)


class FcProcess(FunctionProcess):
    """One instance: FC's runtime; its lines carry the call's FC request id as `fc_request_id`."""

    runtime = FC_RUNTIME

    async def invoke(self, event: dict[str, Any], context: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
        named = {("fc_request_id" if key == "aws_request_id" else key): value for key, value in ids.items()}
        return await super().invoke(event, context, named)


class FcFunction(LambdaFunction):
    """The handler object the router serves for an `fc:` target."""

    kind = "Function Compute function"
    sent = "POSTed"

    def __repr__(self) -> str:
        return f"<fc function {self.name}: {self.spec[len('fc:') :]} in {self.target.code}>"

    def environment(self) -> dict[str, str]:
        return fc_environment(
            name=self.name, handler=self.target.handler, code=self.target.code, settings=self.settings
        )

    async def spawn(self, host: FunctionHost) -> FunctionProcess:
        """A new instance of this function, loaded and ready (the pool calls this)."""
        assert host.tls is not None
        env = self.environment()
        env.update(host.tls.trust_environment(env))
        stream = self.settings.log_stream or log_stream_name()
        process = FcProcess(self.name, self.target.init(), env, self.target.code, stream)
        await process.start(START_TIMEOUT)
        return process

    def _context(
        self, event: Mapping[str, Any], process: FunctionProcess, aws_request_id: str, deadline: float
    ) -> dict[str, Any]:
        """The fields of FC's context object (cfn_provider.functions.fc_context)."""
        return fc_context(
            event,
            name=self.name,
            handler=self.target.handler,
            settings=self.settings,
            request_id=aws_request_id,
            deadline=deadline,
        )
