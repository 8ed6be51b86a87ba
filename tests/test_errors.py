"""cfn_provider.errors: one hierarchy for everything the product raises, its branches and what code relies on."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import cfn_provider
from cfn_provider import errors
from cfn_provider.errors import (
    CfnProviderError,
    Deferred,
    Forged,
    HandlerFailure,
    InputError,
    NotAdmitted,
    OperatorError,
    Rejected,
    StartupError,
    TransportError,
)
from cfn_provider.pipeline import raised
from tests.test_architecture import MODULES

# Files that run inside a `lambda:` function's own interpreter, with the standard library only
# (cfn_provider.functions.runtime): their exceptions never reach the daemon's process (the daemon
# imports confine too, for calls that raise nothing: nondumpable, landlock_abi).
OWN_INTERPRETER = {
    "cfn_provider.functions.runtime",
    "cfn_provider.functions.runtime_crhelper",
    "cfn_provider.functions.confine",
}
BRANCHES = (StartupError, OperatorError, NotAdmitted, InputError, TransportError, HandlerFailure)


SOURCES = MODULES  # every module of the package, by dotted name (as tests/test_architecture.py reads them)


def _classes(path: Path) -> tuple[list[str], list[ast.ClassDef]]:
    """The module's top-level class names, and the classes defined anywhere deeper."""
    tree = ast.parse(path.read_text())
    top = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    nested = [
        node
        for outer in tree.body
        if not isinstance(outer, ast.ClassDef)
        for node in ast.walk(outer)
        if isinstance(node, ast.ClassDef)
    ]
    nested += [
        node
        for outer in tree.body
        if isinstance(outer, ast.ClassDef)
        for node in ast.walk(outer)
        if isinstance(node, ast.ClassDef) and node is not outer
    ]
    return top, nested


def _exception_classes() -> list[tuple[str, type[BaseException]]]:
    found = []
    for name, path in SOURCES.items():
        if name.endswith("__main__"):
            continue
        top, _ = _classes(path)
        if not top:
            continue
        module = importlib.import_module(name)
        for cls_name in top:
            cls = getattr(module, cls_name)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append((f"{name}.{cls_name}", cls))
    return found


EXCEPTIONS = _exception_classes()


def test_the_scan_sees_the_package():
    names = {name for name, _ in EXCEPTIONS}
    assert len(EXCEPTIONS) > 40
    assert {"cfn_provider.sdk.schema.PropertyError", "cfn_provider.handlers.wait.WaitError"} <= names
    assert "cfn_provider.functions.runtime.LoadError" in names  # seen, and exempt below


@pytest.mark.parametrize("name, cls", EXCEPTIONS, ids=[name for name, _ in EXCEPTIONS])
def test_every_exception_the_product_defines_derives_from_the_base_through_one_branch(name, cls):
    if name.rsplit(".", 1)[0] in OWN_INTERPRETER:
        assert not issubclass(cls, CfnProviderError)
        return
    assert issubclass(cls, CfnProviderError), f"{name}: derive it from a branch of cfn_provider.errors"
    if cls.__module__ != "cfn_provider.errors":
        assert [b for b in BRANCHES if issubclass(cls, b)], f"{name}: derives from the base but no branch"
    assert len([b for b in BRANCHES if issubclass(cls, b)]) <= 1, f"{name}: in two branches"


def test_no_exception_class_hides_inside_a_function_or_a_class():
    """The scan above imports top-level classes; a nested exception class would escape it."""
    for name, path in SOURCES.items():
        _, nested = _classes(path)
        for node in nested:
            bases = [ast.unparse(b) for b in node.bases]
            assert not any(b.endswith(("Error", "Exception", "Warning")) for b in bases), (name, node.name, bases)


def test_the_files_run_by_a_function_interpreter_import_nothing_of_the_package():
    """Why they are exempt: the standard library only (cfn_provider.functions.runtime). Imports under
    `if TYPE_CHECKING:` (a local False there) never run; mypy alone reads them."""
    for name in OWN_INTERPRETER:
        tree = ast.parse(SOURCES[name].read_text())
        for block in ast.walk(tree):
            if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING":
                block.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0 and not (node.module or "").startswith("cfn_provider"), (name, node.module)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("cfn_provider") for a in node.names), name


def test_errors_imports_nothing_of_the_package():
    """The stale-install check (cfn_provider.editable) loads it before anything else."""
    tree = ast.parse(Path(errors.__file__).read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    ours = ("from .", "from cfn_provider", "import cfn_provider")
    assert imports and not [n for n in imports if ast.unparse(n).startswith(ours)]


# ---- the start-up branch: what the CLI says once, exit 2 ---------------------------------------


START_UP = {
    "configuration": "cfn_provider.config.ConfigError",
    "store": "cfn_provider.stores.base.StoreConfigError",
    "store table": "cfn_provider.stores.dynamodb.TableNotFound",
    "transport": "cfn_provider.errors.TransportConfigError",
    "web tls": "cfn_provider.intake.web_tls.TlsError",
    "web token": "cfn_provider.trust.web_tokens.TokenError",
    "state file at rest": "cfn_provider.trust.at_rest.StateExposed",
    "event loop": "cfn_provider.loops.EventLoopError",
    "handler loading": "cfn_provider.pipeline.router.HandlerError",
    "handler folders": "cfn_provider.pipeline.handler_path.HandlerPathError",
    "function settings": "cfn_provider.functions.settings.FunctionSettingError",
    "simulate": "cfn_provider.local.simulate.state.SimulateError",
    "stale install": "cfn_provider.editable.StaleInstall",
}


def _named(dotted: str) -> type[BaseException]:
    module, _, name = dotted.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert isinstance(cls, type) and issubclass(cls, BaseException)
    return cls


@pytest.mark.parametrize("kind", sorted(START_UP))
def test_each_kind_of_start_up_failure_is_a_start_up_error_with_exit_2(kind):
    cls = _named(START_UP[kind])
    assert issubclass(cls, StartupError) and cls.exit_code == 2


@pytest.mark.parametrize(
    "dotted, code",
    [
        ("cfn_provider.ops.bootstrap.BootstrapError", 1),
        ("cfn_provider.ops.answer.Refused", 1),
        ("cfn_provider.ops.invoke.InvokeError", 2),  # invoke's help: 2 when an answer did not come or it could not run
    ],
)
def test_operator_commands_errors_keep_their_exit_codes(dotted, code):
    cls = _named(dotted)
    assert issubclass(cls, OperatorError) and cls.exit_code == code


def test_only_the_branches_the_operator_can_act_on_have_an_exit_code():
    for name, cls in EXCEPTIONS:
        if issubclass(cls, CfnProviderError) and not issubclass(cls, (StartupError, OperatorError)):
            assert cls.exit_code is None, name


# ---- what code outside the hierarchy relies on ---------------------------------------------------


@pytest.mark.parametrize(
    "dotted, builtin",
    [
        ("cfn_provider.sdk.schema.PropertyError", ValueError),  # public SDK: handler authors catch ValueError
        ("cfn_provider.config.ConfigError", ValueError),
        ("cfn_provider.stores.base.StoreConfigError", ValueError),
        ("cfn_provider.functions.settings.FunctionSettingError", ValueError),  # --function's parse: a usage error
        ("cfn_provider.trust.web_tokens.TokenError", ValueError),
        ("cfn_provider.pipeline.request.NotARequest", ValueError),
        ("cfn_provider.pipeline.envelope.BadMessage", ValueError),
        ("cfn_provider.trust.urls.UrlRejected", ValueError),
        ("cfn_provider.local.template.values.TemplateError", ValueError),
        ("cfn_provider.stores.dynamodb.TableNotFound", RuntimeError),
        ("cfn_provider.editable.StaleInstall", ModuleNotFoundError),  # raised by the import system
        ("cfn_provider.handlers.wait.WaitError", ValueError),
        ("cfn_provider.handlers.echo.FailedOnPurpose", RuntimeError),
    ],
)
def test_a_class_keeps_the_built_in_base_it_had(dotted, builtin):
    assert issubclass(_named(dotted), builtin)


def test_property_error_is_still_the_sdk_s_and_still_a_value_error():
    from cfn_provider import PropertyError
    from cfn_provider.sdk.schema import PropertyError as Defined

    assert PropertyError is Defined and "PropertyError" in cfn_provider.__all__
    exc = PropertyError("Size: must be at least 1 (minimum)")
    assert isinstance(exc, ValueError) and isinstance(exc, HandlerFailure)
    with pytest.raises(ValueError, match="Size"):
        raise exc
    assert raised.reason(exc) == "Size: must be at least 1 (minimum)"  # the message alone


@pytest.mark.parametrize(
    "dotted",
    [
        "cfn_provider.sdk.schema.PropertyError",
        "cfn_provider.functions.function.FunctionFailed",
        "cfn_provider.handlers._command_config.ConfigError",
        "cfn_provider.handlers._command_process.CommandError",
        "cfn_provider.handlers.echo.FailedOnPurpose",
        "cfn_provider.handlers.elastic_ip_pool.PoolError",
        "cfn_provider.handlers.random_secret.SecretError",
        "cfn_provider.handlers.wait.WaitError",
    ],
)
def test_a_failed_answer_s_reason_is_its_message_alone(dotted):
    cls = _named(dotted)
    assert issubclass(cls, HandlerFailure)
    assert raised.reason(cls("Pool empty: no address left")) == "Pool empty: no address left"


def test_a_handler_failure_without_the_mark_still_names_its_type_and_traceback():
    from cfn_provider.pipeline.runner import HandlerTimeout

    assert raised.reason(HandlerTimeout(5)) == f"HandlerTimeout: timed out after 5 s {raised.TRACEBACK_HINT}"


# ---- the rejections: one class per outcome --------------------------------------------------------


def test_each_rejection_names_its_log_event():
    assert (Rejected.event, Forged.event, Deferred.event) == ("rejected", "security", "deferred")
    outcomes = {Rejected, Forged, Deferred}
    for cls in outcomes:
        assert issubclass(cls, NotAdmitted) and not any(issubclass(cls, other) for other in outcomes - {cls})


def test_the_rejections_are_importable_where_they_were():
    from cfn_provider.pipeline import admission

    assert (admission.Rejected, admission.Forged, admission.Deferred) == (Rejected, Forged, Deferred)
    assert admission.NotAdmitted is NotAdmitted
