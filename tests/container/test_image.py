"""The Dockerfile, built and run for real with podman: no Docker engine needed.

The base image is Debian bookworm made on this machine by debootstrap (python3 3.11, venv,
pip), imported with `podman import` and kept by tag, so later runs skip that step. `make dist`
(tools/dist.py) writes the wheelhouse the Dockerfile installs (hash-checked, no index); the
Dockerfile is built on the base (`--build-arg BASE=...`) by podman's buildah, daemonless
(`--isolation chroot`), twice: the runtime image and `--target demo`. Then

- the runtime image is non-root, has no compiler, no test or emulator packages, and the
  HEALTHCHECK, STOPSIGNAL, ENTRYPOINT and state settings the Dockerfile promises;
- `cfn-provider demo` runs its whole scripted lifecycle inside the demo image;
- `cfn-provider run` in the runtime image, as docs/operating.md runs it (read-only root
  filesystem, `--cap-drop ALL`, `--security-opt no-new-privileges`, the state on a volume), serves a
  Custom::Echo Create published to a moto server on the host (`--network host`) and a
  Custom::Command whose command leaves a child behind (killed and reaped by tini, PID 1: no zombie),
  refuses Custom::RandomSecret (not named), passes `cfn-provider check` and the image's own
  HEALTHCHECK, and stops on `podman stop` (SIGTERM) with exit code 0.

It skips, saying why, only when the tools are missing (`.ci/container-tools` installs them
from Debian's packages) or when podman cannot run even the plain base image here (a sandbox
without the kernel features it needs). A failure to build or run our own image fails.

CFN_CONTAINER_TEST_MIRROR overrides the Debian mirror debootstrap uses.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.local.emulator import Emulator, Provider, Stack
from tests.support.release import make_dist

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # the first test builds the images (debootstrap: minutes)

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/cfn-provider-test-base:bookworm"
IMAGE = "localhost/cfn-provider:test"
DEMO_IMAGE = "localhost/cfn-provider:test-demo"
MIRROR = os.environ.get("CFN_CONTAINER_TEST_MIRROR", "http://deb.debian.org/debian")
# pip inside the build trusts the build host's CA bundle (e.g. a TLS-intercepting proxy's CA):
# bind-mounted for the build's RUN steps only, it lands in no layer.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
INSTALL_HINT = "run .ci/container-tools as root to install podman, buildah and debootstrap from Debian's packages"


@dataclass
class Podman:
    """podman with the options this machine needs: `global_args` before the command (e.g.
    `--runtime runc`), `run_args` for every `podman run` (e.g. ulimits the host allows)."""

    global_args: list[str] = field(default_factory=list)
    run_args: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def __call__(self, *args: str, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["podman", *self.global_args, *args], capture_output=True, text=True, timeout=timeout, **kwargs
        )

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return self("run", *self.run_args, *args, timeout=timeout)

    def image_id(self, ref: str) -> str | None:
        result = self("image", "inspect", "--format", "{{.Id}}", ref)
        return result.stdout.strip() if result.returncode == 0 else None


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _last_line(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {result.returncode}"


def _make_base_image(podman: Podman, workdir: Path) -> None:
    """Debian bookworm with python3 (3.11), its venv module and pip, from Debian's packages."""
    rootfs = workdir / "rootfs"
    started = time.monotonic()
    try:
        result = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,python3-pip",
                "bookworm",
                str(rootfs),
                MIRROR,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            pytest.fail(
                f"debootstrap of the base image from {MIRROR} failed (exit {result.returncode}):\n"
                f"{_tail(result.stdout + result.stderr)}"
            )
        for leftovers in ("var/cache/apt/archives", "var/lib/apt/lists"):  # the .debs and indexes: 100 MB
            for path in (rootfs / leftovers).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = podman("import", "--change", 'CMD ["/bin/bash"]', "-", BASE_IMAGE, stdin=tar.stdout, timeout=300)
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            pytest.fail(f"podman import of the debootstrapped base failed: {_tail(imported.stderr)}")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    podman.timings["base image (debootstrap + import)"] = time.monotonic() - started


def _runtime_options() -> list[tuple[str, list[str], list[str]]]:
    """(description, global args, run args) to try, plainest first."""
    soft_nofile, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft_nproc, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    nproc = 4096 if soft_nproc == resource.RLIM_INFINITY else min(soft_nproc, 4096)
    # podman asks for higher limits than some sandboxes let a process raise itself to
    ulimits = ["--ulimit", f"nofile={soft_nofile}:{soft_nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
    options = [("podman's defaults", [], []), ("the host's ulimits", [], ulimits)]
    if shutil.which("runc"):  # crun refuses a hybrid cgroup v1/v2 layout; runc takes it
        options += [
            ("runc", ["--runtime", "runc"], []),
            ("runc with the host's ulimits", ["--runtime", "runc"], ulimits),
        ]
    return options


def _can_run_containers(podman: Podman) -> None:
    """Find options under which podman runs the plain base image, or skip saying why not."""
    failures = []
    for description, global_args, run_args in _runtime_options():
        candidate = Podman(global_args, run_args, podman.timings)
        result = candidate.run("--rm", "--network", "host", BASE_IMAGE, "python3", "-c", "print('ok')", timeout=120)
        if result.returncode == 0 and result.stdout.strip() == "ok":
            podman.global_args, podman.run_args = global_args, run_args
            return
        failures.append(f"with {description}: {_last_line(result)}")
    pytest.skip(
        "podman cannot run any container on this machine (tried on the plain Debian base image) "
        "-- " + "; ".join(failures)
    )


def _can_build(podman: Podman, workdir: Path) -> None:
    """buildah's chroot isolation works at all here, or skip saying why not."""
    context = workdir / "probe"
    context.mkdir(exist_ok=True)
    (context / "Containerfile").write_text(f"FROM {BASE_IMAGE}\nRUN true\n")
    result = podman("build", "--isolation", "chroot", "--network", "host", "-q", str(context), timeout=300)
    if result.returncode != 0:
        pytest.skip(
            f"podman cannot build even a one-line Containerfile here (--isolation chroot): {_last_line(result)}"
        )


def _context(workdir: Path, podman: Podman) -> Path:
    """The build context the Dockerfile expects: `make dist`'s wheelhouse and constraints.txt."""
    started = time.monotonic()
    context = workdir / "context"
    dist, result = make_dist(context, "--no-smoke-test")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    shutil.rmtree(context / "dist-tools")
    for name in ("Dockerfile", ".dockerignore", "constraints.txt"):
        shutil.copy2(REPO / name, context / name)
    podman.timings["make dist"] = time.monotonic() - started
    return context


def _build(podman: Podman, context: Path, tag: str, *extra: str) -> None:
    old = podman.image_id(tag)
    mounts = ["--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"] if HOST_CA_BUNDLE.is_file() else []
    started = time.monotonic()
    result = podman(
        "build",
        "--isolation",
        "chroot",
        "--network",
        "host",
        "--format",
        "docker",
        "--build-arg",
        f"BASE={BASE_IMAGE}",
        *mounts,
        *extra,
        "--tag",
        tag,
        str(context),
        timeout=600,
    )
    podman.timings[f"build {tag}"] = time.monotonic() - started
    if result.returncode != 0:
        pytest.fail(f"podman build of the Dockerfile ({tag}) failed:\n{_tail(result.stdout + result.stderr, 40)}")
    new = podman.image_id(tag)
    if old and old != new:  # the previous build's image: keep the stage caches, drop its venv layers
        podman("rmi", old)


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Podman]:
    if not shutil.which("podman"):
        pytest.skip(f"podman is not installed: {INSTALL_HINT}")
    if os.geteuid() != 0:
        pytest.skip("the container test needs root (rootful podman, debootstrap)")
    podman = Podman()
    workdir = tmp_path_factory.mktemp("container")
    if podman("image", "exists", BASE_IMAGE).returncode != 0:
        if not shutil.which("debootstrap"):
            pytest.skip(f"debootstrap is not installed and no base image {BASE_IMAGE} is cached: {INSTALL_HINT}")
        _make_base_image(podman, workdir)
    _can_run_containers(podman)
    _can_build(podman, workdir)
    context = _context(workdir, podman)
    _build(podman, context, IMAGE)
    _build(podman, context, DEMO_IMAGE, "--target", "demo")
    yield podman
    shutil.rmtree(workdir, ignore_errors=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:  # what it took, in CI's output too
        options = " ".join(podman.global_args + podman.run_args) or "podman's defaults"
        times = ", ".join(f"{what} {seconds:.0f} s" for what, seconds in podman.timings.items())
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\ntests/container: podman ran with {options}; {times}")


def test_runtime_image_is_non_root_with_runtime_dependencies_only(podman: Podman) -> None:
    config = json.loads(podman("image", "inspect", "--format", "{{json .Config}}", IMAGE).stdout)
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["tini", "-s", "--", "cfn-provider"] and config["Cmd"] == ["run"]
    assert config["StopSignal"] == "SIGTERM"
    assert "CFN_PROVIDER_STATE=sqlite:///var/lib/cfn-provider/state.db" in config["Env"]
    health = json.loads(podman("image", "inspect", "--format", "{{json .HealthCheck}}", IMAGE).stdout)
    assert health and health["Test"] == ["CMD", "cfn-provider", "check"], (
        f"no HEALTHCHECK in the image (built with --format docker?): {health}"
    )

    probe = podman.run(
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python",
        IMAGE,
        "-c",
        """if True:
        import importlib.util, json, os, shutil, stat
        st = os.stat("/var/lib/cfn-provider")
        print(json.dumps({
            "uid": os.getuid(), "state_dir": [st.st_uid, stat.S_IMODE(st.st_mode)],
            "python": list(__import__("sys").version_info[:2]),
            "compilers": [c for c in ("gcc", "cc", "clang") if shutil.which(c)],
            "extras": [m for m in ("moto", "pytest", "hypothesis") if importlib.util.find_spec(m)],
            "runtime": [
                m
                for m in ("aiobotocore", "cryptography", "structlog", "cfn_provider", "cfn_provider.handlers.echo")
                if importlib.util.find_spec(m)
            ],
        }))""",
    )
    assert probe.returncode == 0, probe.stderr
    facts = json.loads(probe.stdout)
    assert facts["uid"] == 10001
    assert facts["python"] == [3, 11]  # the Python constraints.txt was resolved on
    assert facts["state_dir"] == [10001, 0o700]
    assert facts["compilers"] == []
    assert facts["extras"] == []
    assert len(facts["runtime"]) == 5, facts

    # with no daemon running, the health check fails and says why
    check = podman.run("--rm", "--network", "none", IMAGE, "check")
    assert check.returncode == 1
    assert "no health file in /var/lib/cfn-provider: no daemon has run" in check.stderr


def test_demo_lifecycle_inside_the_container(podman: Podman) -> None:
    result = podman.run("--rm", "--network", "host", DEMO_IMAGE, "demo", timeout=300)
    assert result.returncode == 0, f"{_tail(result.stdout, 40)}\n{_tail(result.stderr)}"
    assert "Every request got the answer expected." in result.stdout


def _events(podman: Podman, name: str) -> list[dict[str, Any]]:
    out = []
    for line in podman("logs", name).stdout.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _processes(podman: Podman, name: str) -> dict[int, tuple[str, str]]:
    """pid -> (command line, state letter) of every process in the container, from /proc."""
    probe = podman(
        "exec",
        name,
        "python",
        "-c",
        """if True:
        import json, os
        out = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{pid}/stat").read()
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode().strip()
            except OSError:
                continue
            out[pid] = [cmd or stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2]]
        print(json.dumps(out))""",
    )
    assert probe.returncode == 0, probe.stderr
    return {int(pid): (cmd, state) for pid, (cmd, state) in json.loads(probe.stdout).items()}


def test_run_serves_the_hosts_queue_passes_check_and_stops_on_sigterm(
    podman: Podman, emulator: Emulator, provider: Provider, stack: Stack, tmp_path: Path
) -> None:
    name = f"cfn-provider-test-{uuid.uuid4().hex[:8]}"
    # Custom::Command with a command that forgets a background child: the daemon kills it when the
    # command exits, and tini (PID 1) reaps it; under a bare Python PID 1 it would stay a zombie.
    commands = tmp_path / "commands"
    commands.mkdir(mode=0o755)
    commands.chmod(0o755)
    (commands / "commands.toml").write_text(
        '[commands.forgetful]\nshell = true\ncreate = \'sleep 300 & printf "\\"forgot\\""\'\n'
    )
    (commands / "commands.toml").chmod(0o644)
    env = {
        **emulator.env(),
        "CFN_PROVIDER_QUEUE_URL": provider.queue_url,
        "CFN_PROVIDER_TOPIC_ARN": provider.topic_arn,
        "CFN_PROVIDER_WAIT_SECONDS": "1",
        "CFN_PROVIDER_HANDLER": "Custom::Echo Custom::Command",  # only what is named is served
        "CFN_PROVIDER_COMMAND_CONFIG": "/etc/cfn-provider/commands.toml",
    }
    env_args = [arg for key, value in env.items() for arg in ("--env", f"{key}={value}")]
    # as docs/operating.md runs it: nothing writable but the state volume, no capabilities
    locked_down = [
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--volume",
        f"{name}-state:/var/lib/cfn-provider",
    ]
    started = podman.run(
        "--detach",
        "--name",
        name,
        "--network",
        "host",
        *env_args,
        *locked_down,
        "--volume",
        f"{commands}:/etc/cfn-provider:ro",
        IMAGE,
        "run",
        "--no-verify-signatures",
        "--allow-response-url",
        emulator.endpoint + "/",
    )
    try:
        assert started.returncode == 0, started.stderr

        request = stack.request("Create", "Echo", properties={"Colour": "blue"})
        stack.publish(request)
        response = stack.response(request, timeout=60)
        logs = "\n".join(podman("logs", name).stdout.splitlines()[-20:])
        assert response is not None, f"no answer from the container within 60 s; its log:\n{logs}"
        assert response["Status"] == "SUCCESS", response
        assert response["Data"] == {"Colour": "blue"}

        forgetful = stack.request("Create", "Forgetful", "Custom::Command", {"Command": "forgetful"})
        stack.publish(forgetful)
        response = stack.response(forgetful, timeout=60)
        assert response is not None and response["Status"] == "SUCCESS", response
        assert response["PhysicalResourceId"] == "forgot"
        unnamed = stack.request("Create", "Uninvited", "Custom::RandomSecret", {"ParameterName": "/x"})
        stack.publish(unnamed)
        response = stack.response(unnamed, timeout=60)
        assert response is not None and response["Reason"] == "no handler for Custom::RandomSecret", response
        inspected = json.loads(podman("inspect", "--format", "{{json .HostConfig}}", name).stdout)
        assert inspected["ReadonlyRootfs"] is True and inspected["CapDrop"], inspected
        assert "no-new-privileges" in json.dumps(inspected["SecurityOpt"]), inspected["SecurityOpt"]
        writable = podman("exec", name, "python", "-c", "open('/opt/cfn-provider/x', 'w')")
        assert writable.returncode != 0 and "Read-only file system" in writable.stderr, writable.stderr
        capabilities = podman("exec", name, "grep", "^CapEff", "/proc/self/status")
        assert capabilities.stdout.split() == ["CapEff:", "0000000000000000"], capabilities.stdout
        processes = {}
        for _ in range(50):  # the killed background child: gone, and not left a zombie
            processes = _processes(podman, name)
            if not any(state == "Z" or "sleep" in command for command, state in processes.values()):
                break
            time.sleep(0.2)
        assert not any(state == "Z" for _, state in processes.values()), processes
        assert not any("sleep" in command for command, _ in processes.values()), processes
        assert processes[1][0].startswith("tini"), processes

        check = podman("exec", name, "cfn-provider", "check")
        assert check.returncode == 0, check.stderr
        assert re.match(r"ok \(pid \d+\)", check.stdout), check.stdout
        health = podman("healthcheck", "run", name)  # the image's own HEALTHCHECK
        assert health.returncode == 0, health.stdout + health.stderr
        assert podman("inspect", "--format", "{{.State.Health.Status}}", name).stdout.strip() == "healthy"

        began = time.monotonic()
        stopped = podman("stop", "--time", "60", name, timeout=90)  # STOPSIGNAL, then SIGKILL after 60 s
        assert stopped.returncode == 0, stopped.stderr
        assert time.monotonic() - began < 45, "the daemon did not stop on SIGTERM; podman had to kill it"
        state = json.loads(podman("inspect", "--format", "{{json .State}}", name).stdout)
        assert state["ExitCode"] == 0, state

        events = _events(podman, name)
        kinds = [e.get("event") for e in events]
        assert {"started", "stopping", "stopped"} <= set(kinds), kinds
        answered = [e for e in events if e.get("event") == "request"]
        assert [(e["outcome"], e["status"], e["resource_type"]) for e in answered] == [
            ("answered", "SUCCESS", "Custom::Echo"),
            ("answered", "SUCCESS", "Custom::Command"),
            ("answered", "FAILED", "Custom::RandomSecret"),
        ]
    finally:
        podman("rm", "--force", "--time", "0", name)
        podman("volume", "rm", "--force", f"{name}-state")
