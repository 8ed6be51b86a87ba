"""`make dist`: build the release, check it, make a hashed wheelhouse, and smoke-test the wheel.

    dist/cfn_sns_provider-VERSION-py3-none-any.whl    the wheel (built from the sdist: the sdist is complete)
    dist/cfn_sns_provider-VERSION.tar.gz              the sdist
    dist/wheelhouse/*.whl                             the wheel and its runtime dependencies, at the
                                                      versions in constraints.txt, for the TARGET: by
                                                      default CPython 3.11 on x86_64 glibc 2.34 (Amazon
                                                      Linux 2023's python3.11), whatever machine builds it
                                                      (--python-version, --arch, --glibc or --platform)
    dist/wheelhouse/requirements.txt                  every wheel there as NAME==VERSION --hash=sha256:...
    dist/wheelhouse/TARGET                            the target it was built for, one line

The target is pinned so a release built on a laptop (macOS, another Python) fails here, at build
time, when a dependency has no wheel for the instances, instead of at their boot: pip downloads
only wheels for the target, and every wheel in the wheelhouse (`--with` ones too) is checked
against the target's tags. The sha256 of requirements.txt is printed last: deploy/provider.yaml's
ReleaseSha256, which pins the stack to this release.

The wheelhouse is what deploy/provider.yaml installs from (upload it: `aws s3 sync dist/wheelhouse
s3://BUCKET/PREFIX/`), with `pip install --no-index --find-links DIR --require-hashes -r
DIR/requirements.txt`, and what the Dockerfile installs. Handler packages go in with `--with`
(a wheel file or a pinned requirement), so their hashes are in the same file.

Steps, each stopping the build on failure: build (python -m build, from a copy of the tracked
files), both archives carry LICENSE and the sdist no tests, `twine check --strict`, the wheelhouse
(pip download, only binary wheels), then a fresh virtualenv outside the repository gets the wheel
from the wheelhouse (--require-hashes, no index) plus the [demo] extra, and runs `cfn-provider
--version` and `cfn-provider demo` there.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = "cfn-sns-provider"
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def canonical(name: str) -> str:
    """PEP 503's normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def step(what: str) -> None:
    print(f"make dist: {what}", flush=True)


def run(*args: str | Path, cwd: Path | None = None) -> None:
    result = subprocess.run([str(a) for a in args], cwd=cwd, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        sys.exit(f"make dist: failed (exit {result.returncode}): {' '.join(str(a) for a in args)}")


def source_copy(into: Path) -> Path:
    """The files git tracks (everything, when this is not a git checkout), copied: the build
    writes nothing into the checkout and packs nothing that is not part of the project."""
    target = into / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True
    )
    if listed.returncode == 0 and listed.stdout:
        for name in listed.stdout.decode().split("\0"):
            if name and (REPO / name).is_file():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, target / name)
    else:
        shutil.copytree(
            REPO,
            target,
            ignore=shutil.ignore_patterns(
                ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"
            ),
        )
    return target


def archive_problems(wheel: Path, sdist: Path) -> list[str]:
    """What the two archives lack or carry wrongly: each carries the licence (LICENSE, Apache-2.0),
    and the sdist no tests (they need the repository's conftest, support modules and docs: MANIFEST.in)."""
    with zipfile.ZipFile(wheel) as whl:
        in_wheel = whl.namelist()
    with tarfile.open(sdist) as tar:
        in_sdist = [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]
    problems = []
    if not any(re.fullmatch(r"[^/]+\.dist-info/(licenses/)?LICENSE", name) for name in in_wheel):
        problems.append(f"{wheel.name} has no .dist-info/licenses/LICENSE")
    if "LICENSE" not in in_sdist:
        problems.append(f"{sdist.name} has no LICENSE")
    tests = [name for name in in_sdist if name == "tests" or name.startswith("tests/")]
    if tests:
        problems.append(f"{sdist.name} carries tests without their conftest and support: {tests[:3]}")
    return problems


def version() -> str:
    """cfn_provider.__version__, read as setup.cfg's `version = attr:` reads it (no import)."""
    text = (REPO / "daemon" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    if not found:
        sys.exit('make dist: no __version__ = "..." line in daemon/__init__.py')
    return found[1]


def hashed_requirements(wheelhouse: Path) -> str:
    """One line per project: NAME==VERSION and the sha256 of each of its wheels there."""
    found: dict[tuple[str, str], list[str]] = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        match = _WHEEL.match(wheel.name)
        if not match:
            sys.exit(f"make dist: not a wheel file name: {wheel.name}")
        key = (canonical(match["name"]), match["version"])
        found.setdefault(key, []).append(hashlib.sha256(wheel.read_bytes()).hexdigest())
    versions: dict[str, list[str]] = {}
    for name, ver in found:
        versions.setdefault(name, []).append(ver)
    twice = {name: vs for name, vs in versions.items() if len(vs) > 1}
    if twice:
        sys.exit(f"make dist: the wheelhouse has several versions of {twice}: one per project")
    lines = [
        "# Written by `make dist` (tools/dist.py): every wheel in this folder, pinned, with its sha256.",
        "# pip install --no-index --find-links THIS_FOLDER --require-hashes -r THIS_FILE",
    ]
    for (name, ver), digests in sorted(found.items()):
        lines.append(f"{name}=={ver} " + " ".join(f"--hash=sha256:{d}" for d in sorted(digests)))
    return "\n".join(lines) + "\n"


TARGET_PYTHON = "3.11"  # deploy/provider.yaml installs python3.11 (Amazon Linux 2023); the Dockerfile's too
TARGET_ARCH = "x86_64"
TARGET_GLIBC = 34  # Amazon Linux 2023: glibc 2.34


def target_platforms(arch: str, glibc: int) -> list[str]:
    """pip --platform values for a glibc 2.`glibc` Linux on `arch`: every manylinux tag it runs
    (pip expands only the legacy manylinux2014 alias itself)."""
    return [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 16, -1)] + [f"manylinux2014_{arch}"]


def incompatible_wheels(wheelhouse: Path, python: str, platforms: list[str]) -> list[str]:
    """The wheels there that the target (CPython `python`, one of `platforms`) cannot install."""
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import parse_wheel_filename

    version = tuple(int(part) for part in python.split("."))
    supported = set(cpython_tags(version, platforms=platforms)) | set(compatible_tags(version, platforms=platforms))
    bad = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        _, _, _, tags = parse_wheel_filename(wheel.name)
        if not tags & supported:
            bad.append(wheel.name)
    return bad


def target_args(python: str, platforms: list[str]) -> list[str]:
    """pip download's arguments for the target: only its wheels, whatever machine runs pip."""
    abi = "cp" + python.replace(".", "")
    return [
        *(a for p in platforms for a in ("--platform", p)),
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--abi",
        abi,
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]


def builds_here(python: str, platforms: list[str]) -> bool:
    """Whether this machine is the target (so the smoke test can install the wheelhouse here)."""
    from packaging.tags import sys_tags

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    return here == python and any(tag.platform in platforms for tag in sys_tags())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/dist.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="output folder (default: dist)")
    parser.add_argument(
        "--with",
        dest="extra",
        action="append",
        default=[],
        metavar="REQ",
        help="also put this (a wheel file, or NAME==VERSION) and its dependencies in the wheelhouse",
    )
    parser.add_argument(
        "--platform",
        action="append",
        default=[],
        help="pip download --platform, instead of the ones --arch and --glibc make (e.g. manylinux2014_aarch64)",
    )
    parser.add_argument("--python-version", default=TARGET_PYTHON, help="the target's CPython (default: %(default)s)")
    parser.add_argument("--arch", default=TARGET_ARCH, help="the target's machine (default: %(default)s; aarch64)")
    parser.add_argument(
        "--glibc", type=int, default=TARGET_GLIBC, help="the target's glibc 2.N, this N (default: %(default)s)"
    )
    parser.add_argument("--no-smoke-test", action="store_true", help="skip the fresh-virtualenv demo")
    parser.add_argument(
        "--smoke-venv",
        type=Path,
        help="make the smoke test's virtualenv here and keep it (default: a temporary folder, removed)",
    )
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    python = Path(sys.executable)
    ver = version()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)

    with tempfile.TemporaryDirectory(prefix="cfn-provider-dist-") as tmp:
        work = Path(tmp)
        step(f"building {PROJECT} {ver} (sdist, then the wheel from it)")
        run(python, "-m", "build", "--sdist", "--wheel", "--outdir", out, source_copy(work))
        wheel = out / f"cfn_sns_provider-{ver}-py3-none-any.whl"
        sdist = out / f"cfn_sns_provider-{ver}.tar.gz"
        if not wheel.is_file() or not sdist.is_file():
            sys.exit(
                f"make dist: expected {wheel.name} and {sdist.name} in {out}, "
                f"found {sorted(p.name for p in out.iterdir())}"
            )

        step("the licence in the wheel and the sdist, and no tests in the sdist")
        problems = archive_problems(wheel, sdist)
        if problems:
            sys.exit("make dist: " + "; ".join(problems))

        step("twine check --strict")
        run(python, "-m", "twine", "check", "--strict", wheel, sdist)

        step("the wheelhouse: the wheel and its runtime dependencies, pinned by constraints.txt, binary wheels only")
        wheelhouse = out / "wheelhouse"
        platforms = args.platform or target_platforms(args.arch, args.glibc)
        target = f"CPython {args.python_version} on {' '.join(platforms)}"
        print(f"  target: {target}", flush=True)
        run(
            python,
            "-m",
            "pip",
            "download",
            "--disable-pip-version-check",
            "--quiet",
            "--only-binary",
            ":all:",
            *target_args(args.python_version, platforms),
            "--dest",
            wheelhouse,
            "-c",
            REPO / "constraints.txt",
            wheel,
            *args.extra,
        )
        bad = incompatible_wheels(wheelhouse, args.python_version, platforms)
        if bad:
            sys.exit(f"make dist: not installable on the target ({target}): {', '.join(bad)}")
        (wheelhouse / "TARGET").write_text(target + "\n")
        requirements = wheelhouse / "requirements.txt"
        requirements.write_text(hashed_requirements(wheelhouse))
        count = len(list(wheelhouse.glob("*.whl")))
        print(f"  {count} wheels; {requirements} pins and hashes each", flush=True)
        print(f"  ReleaseSha256={hashlib.sha256(requirements.read_bytes()).hexdigest()}", flush=True)

        if args.no_smoke_test or not builds_here(args.python_version, platforms):
            return 0
        step("installing the wheel into a fresh virtualenv outside the repository (--require-hashes, no index)")
        venv = args.smoke_venv.resolve() if args.smoke_venv else work / "venv"
        run(python, "-m", "venv", venv)
        pip = venv / "bin" / "pip"
        run(
            pip,
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            wheelhouse,
            "--require-hashes",
            "-r",
            wheelhouse / "requirements.txt",
            cwd=work,
        )
        run(
            pip,
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-c",
            REPO / "constraints.txt",
            f"{PROJECT}[demo]=={ver}",
            "--find-links",
            wheelhouse,
            cwd=work,
        )
        step("cfn-provider demo, from that virtualenv")
        run(venv / "bin" / "cfn-provider", "--version", cwd=work)
        run(venv / "bin" / "cfn-provider", "demo", cwd=work)
    step(f"done: {wheel.relative_to(out.parent) if out.parent in wheel.parents else wheel}, {sdist.name}, wheelhouse/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
