"""`lambda:` targets: what `--handler 'Custom::Thing=lambda:index.handler'` names, found and checked at start.

The target is Lambda's own Handler setting, MODULE.FUNCTION (`index.handler`, `pkg.mod.handler`,
`dir/mod.handler`, `update-iam-role.handler`), read as Lambda's Python runtime reads it (`parse_target`),
or the daemon's own MODULE:FUNCTION[.ATTR]. The function's folder (Lambda's /var/task) is its
`code` setting (cfn_provider.functions.settings), else the first `--handler-path` folder its
top-level module is in, else the entry of the daemon's own path (PYTHONPATH) it is found in; the
daemon only looks, it never imports the function itself. The named folders come first: a
function module may share a standard module's name (`resource.py`), which the daemon's own path
would otherwise find in the standard library.

`load` checks the function the way it will run, in an interpreter of its own that imports it and
exits, so a typo, a missing dependency, an async handler, a module shadowing one its interpreter
has already loaded, or an unusable crhelper stops the start (HandlerError naming the target);
it returns the handler object (cfn_provider.functions.function) that runs it in its own processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from importlib.machinery import PathFinder
from pathlib import Path

from .environ import function_environment
from .exits import kill_group
from .function import FunctionTarget, LambdaFunction
from .process import RUNTIME, describe_exit, log_stream_name
from .settings import FunctionSettings, default_name

PREFIX = "lambda:"
CHECK_TIMEOUT = 120.0  # seconds the check may take to import the function


MAX_HANDLER = 128  # Lambda's limit on its Handler setting (a string of no whitespace)
_FORM = "lambda:MODULE.FUNCTION (Lambda's Handler setting, e.g. lambda:index.handler)"


def parse_target(spec: str) -> tuple[str, str]:
    """'lambda:pkg.mod.handler' | 'lambda:dir/mod.handler' | 'lambda:pkg.mod:handler' -> (module, attr).

    MODULE.FUNCTION is split as Lambda's Python runtime splits its Handler (awslambdaric's
    `_get_handler`): at the last dot, the module's `/` read as `.`, the module then imported by
    that name (importlib finds `update-iam-role.py` as module `update-iam-role`, so hyphens and
    other characters a file name may hold are accepted) and FUNCTION taken from it with getattr.
    Refused here, as Lambda refuses them: no dot, an empty module or function, a relative module
    (a leading `.` or `/`), a built-in module (`sys.handler`), whitespace, over 128 characters. Every
    other string is left to the import check (`load`), which imports it as the function's runtime
    will. MODULE:FUNCTION[.ATTR] is the daemon's own form (an attribute path after the colon)."""
    target = spec[len(PREFIX) :].strip() if spec.startswith(PREFIX) else spec.strip()
    if not target or len(target) > MAX_HANDLER or any(c.isspace() for c in target):
        raise ValueError(f"{spec!r} is not {_FORM}: 1 to {MAX_HANDLER} characters, no whitespace")
    if ":" in target:
        module, _, attr = target.partition(":")
        module = module.replace("/", ".")
        if not attr or not all(p.isidentifier() for p in attr.split(".")):
            raise ValueError(f"{spec!r}: after the colon, a function name (MODULE:FUNCTION), e.g. index:handler")
    else:
        path, dot, attr = target.rpartition(".")
        if not dot:
            raise ValueError(f"{spec!r} is not {_FORM}: there is no dot between the module and the function")
        module = path.replace("/", ".")
    if not module or not attr:
        raise ValueError(f"{spec!r} is not {_FORM}: the module or the function is empty")
    if module.startswith("."):
        raise ValueError(f"{spec!r}: the module {module!r} is relative (a leading . or /), which Lambda cannot import")
    top = module.partition(".")[0]
    if top in sys.builtin_module_names:
        raise ValueError(f"{spec!r}: {top} is a built-in module, which Lambda refuses as a handler module")
    return module, attr


def find_code(module: str, settings: FunctionSettings, folders: tuple[str, ...] = ()) -> str:
    """The function's folder: `code` when configured, else the first of `folders` (the
    --handler-path folders), then of the daemon's path, that has its top-level module."""
    top = module.partition(".")[0]
    if settings.code:
        folder = Path(settings.code)
        if not folder.is_dir():
            raise FileNotFoundError(f"the function's code folder {folder} does not exist")
        return str(folder)
    for entry in (*folders, *sys.path):
        folder = Path(entry or os.getcwd())
        if folder.is_dir() and PathFinder.find_spec(top, [str(folder)]) is not None:
            return str(folder.resolve())
    raise ModuleNotFoundError(
        f"No module named {top!r} on the daemon's path (set the function's folder with "
        f'[functions."TYPE"] code = "/path" or --function \'TYPE=code=/path\', or name its '
        "folder with --handler-path)"
    )


def load(
    spec: str, resource_type: str, settings: FunctionSettings | None = None, folders: tuple[str, ...] = ()
) -> LambdaFunction:
    """Find and check a `lambda:` target (see the module docstring); raise with the reason if unusable."""
    settings = settings or FunctionSettings()
    module, attr = parse_target(spec)
    target = FunctionTarget(
        spec, module, attr, find_code(module, settings, folders), settings.name or default_name(resource_type), settings
    )
    check(target)
    return LambdaFunction(target)


def check(target: FunctionTarget, runtime: str = RUNTIME, env: dict[str, str] | None = None) -> None:
    """Import the function in an interpreter of its own (as it will run: `runtime`, with `env`, by
    default a Lambda function's) and exit; raise why not."""
    if env is None:
        env = function_environment(
            name=target.name,
            handler=target.handler,
            code=target.code,
            memory_mb=target.settings.memory_mb,
            log_group=target.settings.log_group or f"/aws/lambda/{target.name}",
            log_stream=target.settings.log_stream or log_stream_name(),
            configured=target.settings.environment,
        )
    returncode, stdout, stderr = _run_check(target, env, runtime)
    for line in stdout.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("op") == "ready":
            return
        if isinstance(doc, dict) and doc.get("op") == "failed":
            raise ImportError(str(doc.get("reason")))
    tail = " | ".join(stderr.strip().splitlines()[-3:])[:500]
    raise RuntimeError(
        f"the function's interpreter {describe_exit(returncode)} while importing it" + (f": {tail}" if tail else "")
    )


def _run_check(target: FunctionTarget, env: dict[str, str], runtime: str = RUNTIME) -> tuple[int, str, str]:
    """The check's interpreter run to its end: its exit status and output. Its output goes to files,
    not pipes, so a process the function started at import (holding them) never holds the check up;
    its whole process group is killed once it has ended (cfn_provider.functions.exits)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-I", runtime],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            env=env,
            cwd=target.code,
            start_new_session=True,
        )
        try:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write((json.dumps(target.init(check=True)) + "\n").encode())
                proc.stdin.close()
            proc.wait(CHECK_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"importing the function took over {CHECK_TIMEOUT:.0f} s") from None
        finally:
            kill_group(proc.pid)
            proc.wait()
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
