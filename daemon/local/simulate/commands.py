"""The `cfn-provider simulate` click group and its create / update / delete commands: options,
the checks made before anything starts, and the operation each one runs."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from ...cli_errors import Commands
from ...cli_options import HANDLER_HELP, HANDLER_PATH_HELP, LOGS_HELP, PARAMETER_HELP
from ...functions.options import function_option
from ..template import StackInfo, Template, TemplateError, lint, parse_parameters
from ..template import load as load_template
from ..template.lint import missing_extra
from .backend import Backend
from .console import Console
from .engine import Engine
from .remember import Remembered
from .seed import run_seed
from .served import check as check_served
from .session import announce, run
from .state import DEFAULT_STATE_DIR, UPDATABLE, SimulateError, StackState, read_state
from .template_functions import TemplateDefaults, forget, from_template

_STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")


def default_stack_name(template_path: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9-]+", "-", Path(template_path).stem).strip("-") or "stack"
    if not stem[0].isalpha():
        stem = "stack-" + stem
    return stem[:128]


def _state_path(stack_name: str | None, state_file: str | None, must_exist: bool) -> tuple[Path, str | None]:
    if state_file:
        return Path(state_file), stack_name
    if stack_name:
        return Path(DEFAULT_STATE_DIR) / f"{stack_name}.json", stack_name
    if must_exist:
        found = sorted(Path(DEFAULT_STATE_DIR).glob("*.json"))
        if len(found) == 1:
            return found[0], None
        if not found:
            raise SimulateError(f"no simulated stack in ./{DEFAULT_STATE_DIR}/: give --stack-name or --state-file")
        raise SimulateError(
            f"several simulated stacks in ./{DEFAULT_STATE_DIR}/ "
            f"({', '.join(p.stem for p in found)}): give --stack-name"
        )
    raise AssertionError("unreachable")


def _handlers(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Checked as `run` checks them, and kept as typed (the state file remembers them)."""
    from ...pipeline.router import parse_handler_option

    try:
        for value in values:
            parse_handler_option(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return values


def _parameters(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    try:
        return parse_parameters(values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


_COMMON_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option(
        "--state-file",
        type=click.Path(dir_okay=False),
        help="Where the simulated stack is kept between calls (default ./.cfn-simulate/STACK.json).",
    ),
    click.option(
        "--handler",
        "handlers",
        multiple=True,
        callback=_handlers,
        metavar="TYPE=MODULE[:ATTR]",
        help=HANDLER_HELP + " simulate: remembered for the stack's next operations; a type the template "
        "uses that no --handler serves is refused before anything runs.",
    ),
    function_option(
        "A setting of the lambda: function serving TYPE, as for `run` (repeatable): env.NAME=VALUE (an environment "
        "variable of its own), code=FOLDER, timeout=S, memory_mb=N, concurrency=N, name=NAME, log_group=NAME, "
        "log_stream=NAME. Remembered; given again, a setting replaces the remembered one. The template's own "
        "AWS::Lambda::Function resources give defaults (docs/porting-lambda.md).",
        name="functions",
        as_typed=True,
    ),
    click.option(
        "--handler-path",
        "handler_paths",
        multiple=True,
        type=click.Path(file_okay=False),
        metavar="DIR",
        help=HANDLER_PATH_HELP + " simulate: default the current folder; remembered.",
    ),
    click.option(
        "--endpoint",
        metavar="URL",
        help="Use this AWS-compatible endpoint (e.g. a running moto or LocalStack) instead of "
        "the stack's own embedded moto server. Remembered.",
    ),
    click.option(
        "--poll-every",
        type=click.FloatRange(0.1, 3600),
        metavar="SECONDS",
        help="Poll long-running resources at least this often, whatever interval they ask for "
        "(crhelper's default is 2 minutes). Remembered.",
    ),
    click.option(
        "--region",
        help="With --endpoint: the region to use (default AWS_REGION / AWS_DEFAULT_REGION "
        "/ us-east-1). The embedded emulator is us-east-1.",
    ),
    click.option(
        "--wait-limit",
        type=click.FloatRange(0.1, 3600),
        metavar="SECONDS",
        help="Wait at most this long for each response, even when ServiceTimeout allows more "
        "(CloudFormation waits the whole ServiceTimeout, default 3600 s).",
    ),
    click.option(
        "--logs/--no-logs",
        "show_logs",
        default=False,
        show_default=True,
        help=LOGS_HELP,
    ),
]


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options create, update and delete share (after --stack-name, whose default each says)."""
    for option in reversed(_COMMON_OPTIONS):
        fn = option(fn)
    return fn


def _stack_name(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--stack-name", help=f"Name of the simulated stack (default: {default}).")


_ONLY_STACK = "the only stack in ./.cfn-simulate/"


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def simulate() -> None:  # Commands: a SimulateError is `cfn-provider: <why>`, exit 2, when run on its own too
    """A local stand-in for CloudFormation, to try handlers: drive a template's custom
    resources through SNS -> SQS -> the daemon -> a presigned S3 URL, with CloudFormation's
    semantics (dependency order, OldResourceProperties, replacement and its cleanup Delete,
    rollbacks, ServiceTimeout, Fn::GetAtt on the answers' Data, Outputs).

    \b
      cfn-provider simulate create template.yaml --handler Custom::Thing=mything
      cfn-provider simulate update template-v2.yaml --parameter Size=4
      cfn-provider simulate delete

    Everything runs on this machine: the stack's own moto server (kept between its operations,
    so a Delete finds what the Create made; --seed FILE puts things there first), unless
    --endpoint. The template is checked with cfn-lint first. Only custom resources are
    simulated; other resources are not created, and a Ref or Fn::GetAtt to one gives a
    placeholder. Each custom resource's ServiceToken is replaced by the simulated topic. The
    stack is kept in ./.cfn-simulate/STACK.json, with the options to use again (handlers,
    function settings, handler folders, endpoint, poll speed, parameters). A custom resource whose
    ServiceToken is !GetAtt Fn.Arn of the template's own AWS::Lambda::Function is served by that
    function with its Handler, Code, Environment, Timeout and MemorySize (--handler and --function
    override it). Exit status: 0 when the stack ends
    CREATE_COMPLETE / UPDATE_COMPLETE / DELETE_COMPLETE, 1 otherwise (failed, rolled back),
    2 when nothing could be done (bad template, options or stack state).
    """


_SEED = click.option(
    "--seed",
    type=click.Path(dir_okay=False, exists=True),
    metavar="FILE",
    help="Run this Python script (boto3 calls) against the stack's AWS before the operation; "
    "a module-level dict `parameters` gives template parameters.",
)


@simulate.command("create")
@click.argument("template_path", metavar="TEMPLATE", type=click.Path(dir_okay=False))
@click.option(
    "--parameter",
    "parameters",
    multiple=True,
    callback=_parameters,
    metavar="KEY=VALUE",
    help=PARAMETER_HELP,
)
@_SEED
@_stack_name("from the template's file name")
@_common
def create_command(template_path: str, parameters: dict[str, str], seed: str | None, **options: Any) -> None:
    """Create the stack from TEMPLATE (YAML or JSON): Create requests in dependency order; on a
    failure, the rollback (Delete of what was created)."""
    stack_name = options["stack_name"] or default_stack_name(template_path)
    _check_stack_name(stack_name)
    path, _ = _state_path(stack_name, options["state_file"], must_exist=False)
    existing = read_state(path)
    if existing is not None:
        hint = (
            " and can only be deleted: cfn-provider simulate delete"
            if existing.status == "ROLLBACK_COMPLETE"
            else ": update it, or delete it first"
        )
        raise SimulateError(f"Stack [{existing.name}] already exists ({existing.status}, in {path}){hint}")
    _require_emulator(options)
    doc = load_template_or_fail(template_path, options["region"])
    defaults = from_template(doc, parameters, StackInfo.new(stack_name), template_path, path)
    try:  # the template's own functions serve their types too
        _check_served(doc, Remembered().with_options(options), defaults)
        if not seed:  # a bad template fails before anything starts (a seed may still give parameters)
            make_template(doc, parameters, StackInfo.new(stack_name), None)
    except SimulateError:
        forget(path)
        raise

    def operation(engine: Engine, backend: Backend, console: Console) -> str:
        overrides = {**(run_seed(seed, console, backend.describe()) if seed else {}), **parameters}
        template = make_template(doc, overrides, engine.state.info, console)
        engine.state.parameters, engine.state.parameter_overrides = template.parameters, overrides
        announce(console, backend, template, engine.state, path)
        return engine.create(template)

    def new_state(backend: Backend) -> StackState:
        info = StackInfo.new(stack_name, backend.region, backend.account_id)
        return StackState(
            stack_name,
            info.stack_id,
            info.region,
            info.account_id,
            doc,
            template_file=str(Path(template_path).resolve()),
            parameter_overrides=parameters,
        )

    try:
        run("create", path, options, new_state, operation, defaults=defaults)
    finally:
        if not path.exists():  # nothing was created: nor are its inline functions kept
            forget(path)


@simulate.command("update")
@click.argument("template_path", metavar="[TEMPLATE]", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--template",
    "template_option",
    type=click.Path(dir_okay=False),
    hidden=True,  # the TEMPLATE argument, as earlier builds spelt it: still accepted, no longer shown
)
@click.option(
    "--parameter",
    "parameters",
    multiple=True,
    callback=_parameters,
    metavar="KEY=VALUE",
    help=PARAMETER_HELP + " update: values given before are kept unless given again (as `aws "
    "cloudformation deploy` does).",
)
@_SEED
@_stack_name(_ONLY_STACK)
@_common
def update_command(
    template_path: str | None, template_option: str | None, parameters: dict[str, str], seed: str | None, **options: Any
) -> None:
    """Update the stack (to TEMPLATE, default: its current template, e.g. with new parameters): Update
    requests (with OldResourceProperties) for changed resources, Create for new ones; then the
    cleanup phase Deletes replaced ids and removed resources. On a failure, the rollback: Update
    back to the old properties, Delete of what was created."""
    if template_path and template_option and Path(template_path).resolve() != Path(template_option).resolve():
        raise click.UsageError("give the new template once: TEMPLATE or --template")
    template_path = template_path or template_option
    if options["stack_name"]:
        _check_stack_name(options["stack_name"])
    path, _ = _state_path(options["stack_name"], options["state_file"], must_exist=True)
    state = read_state(path)
    if state is None:
        raise SimulateError(
            f"Stack [{options['stack_name'] or path.stem}] does not exist (no state file {path}): create it first"
        )
    if state.status not in UPDATABLE:
        raise SimulateError(
            f"Stack [{state.name}] is in {state.status} state and can not be updated"
            + (": delete it (cfn-provider simulate delete)" if state.status != "DELETE_COMPLETE" else "")
        )
    _require_emulator(options, state)
    doc = load_template_or_fail(template_path, options["region"] or state.region) if template_path else state.template
    params = doc.get("Parameters")
    declared = params if isinstance(params, dict) else {}
    overrides = {k: v for k, v in state.parameter_overrides.items() if k in declared}
    overrides.update(parameters)
    new = make_template(doc, overrides, state.info, None)  # a bad template fails before anything starts
    defaults = from_template(doc, overrides, state.info, template_path or state.template_file, path)
    _check_served(doc, state.remembered.with_options(options), defaults)
    changed_types = [
        k for k in new.custom if k in state.resources and state.resources[k].type != new.resources[k]["Type"]
    ]
    if changed_types:
        raise SimulateError(
            "Update of resource type is not permitted. The new template modifies resource type "
            f"of the following resources: [{', '.join(changed_types)}]"
        )

    def operation(engine: Engine, backend: Backend, console: Console) -> str:
        st = engine.state
        given = {**(run_seed(seed, console, backend.describe()) if seed else {}), **parameters}
        now = {**overrides, **{k: v for k, v in given.items() if k in declared}}
        old = make_template(st.template, st.parameter_overrides, st.info, None)
        new = make_template(doc, now, st.info, console)
        announce(console, backend, new, st, path)
        if not engine.changes(old, new):
            st.template, st.parameter_overrides, st.parameters = doc, now, new.parameters
            engine.save(st)
            console.line("No updates are to be performed.")
            return "NO_CHANGES"
        return engine.update(old, new, now, str(Path(template_path).resolve()) if template_path else None)

    run("update", path, options, lambda _backend: state, operation, previous=state, defaults=defaults)


@simulate.command("delete")
@_stack_name(_ONLY_STACK)
@_common
def delete_command(**options: Any) -> None:
    """Delete the stack: Delete requests in reverse dependency order (DeletionPolicy Retain is
    honoured); the state file goes once the stack is DELETE_COMPLETE, and the stack's emulator
    with it."""
    if options["stack_name"]:
        _check_stack_name(options["stack_name"])
    try:
        path, _ = _state_path(options["stack_name"], options["state_file"], must_exist=True)
    except SimulateError as exc:
        if "no simulated stack" not in str(exc):
            raise
        click.echo(f"No simulated stack to delete ({str(exc).split(':')[0]}).")
        return
    state = read_state(path)
    if state is None:
        click.echo(
            f"Stack [{options['stack_name'] or path.stem}] does not exist (no state file {path}): nothing to delete."
        )
        return
    _require_emulator(options, state)

    def operation(engine: Engine, backend: Backend, console: Console) -> str:
        st = engine.state
        try:
            template: Template | None = make_template(st.template, st.parameter_overrides, st.info, None)
        except SimulateError:
            template = None
        announce(console, backend, template, st, path)
        return engine.delete(template)

    defaults = from_template(state.template, state.parameter_overrides, state.info, state.template_file, path)
    run("delete", path, options, lambda _backend: state, operation, previous=state, defaults=defaults)


def _require_emulator(options: Mapping[str, Any], state: StackState | None = None) -> None:
    """The embedded emulator is moto's server, from the `simulate` extra: say so before anything starts."""
    import importlib.util

    if options.get("endpoint") or (state is not None and state.remembered.endpoint):
        return
    if importlib.util.find_spec("moto") is None:
        raise SimulateError(str(missing_extra("moto", "moto's server as its embedded AWS emulator")))


def _check_served(doc: Mapping[str, Any], remembered: Remembered, defaults: TemplateDefaults) -> None:
    """Every custom type of the template has a handler, given or the template's own function (else
    SimulateError, before anything runs); a handler for a type it never uses is named."""
    handlers, _ = defaults.merged(list(remembered.handlers), [])
    for warning in check_served(doc, handlers):
        Console().warn(warning)


def _check_stack_name(name: str) -> None:
    if not _STACK_NAME.fullmatch(name):
        raise SimulateError(
            f"1 validation error detected: Value '{name}' at 'stackName' failed to satisfy constraint: "
            "a letter, then letters, digits and hyphens, at most 128 characters"
        )


def load_template_or_fail(path: str, region: str | None = None) -> dict[str, Any]:
    """The template, after cfn-lint found no error in it (its warnings are shown)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = None  # load() says why
    try:
        if text is not None:
            for finding in lint.check(path, text, region or "us-east-1"):
                Console().warn(str(finding))
        return load_template(path)
    except TemplateError as exc:
        raise SimulateError(str(exc)) from None


def make_template(
    doc: Mapping[str, Any], parameters: Mapping[str, str], info: StackInfo, console: Console | None
) -> Template:
    try:
        template = Template(doc, parameters, info, on_warning=console.warn if console else None)
    except TemplateError as exc:
        raise SimulateError(str(exc)) from None
    return template
