"""The Makefile's user-facing targets do what README.md says, on a fresh clone: `make demo`
installs only the [demo] extra, `make chaos` gets faketime (or says how, in one line, before
anything runs), `make bench` installs dynalite as `make test` does, and the Makefile and the docs
agree on how long `make bench` takes. Dry runs (`make -n`) into a virtualenv path of the test's,
so nothing is installed."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    make_bin = shutil.which("make")
    if not make_bin:
        pytest.skip("make is not installed")
    return subprocess.run(
        [make_bin, "--no-print-directory", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_make_demo_installs_only_the_demo_extra(tmp_path: Path) -> None:
    planned = make("-n", "demo", f"VENV={tmp_path / 'venv'}")
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line]
    assert len(installs) == 1 and "-e '.[demo]'" in installs[0], installs
    assert "--quiet" not in installs[0], "make demo shows pip's progress"
    assert "installing the package and the AWS emulator" in planned.stdout  # said before it starts
    extras = configparser.ConfigParser()
    extras.read(REPO / "setup.cfg")
    demo = extras["options.extras_require"]["demo"]
    for tool in ("mypy", "hypothesis", "pytest"):
        assert tool not in demo, f"{tool} is not something the demo needs"


def test_make_bench_installs_dynalite(tmp_path: Path) -> None:
    planned = make("-n", "bench", f"VENV={tmp_path / 'venv'}")
    assert planned.returncode == 0, planned.stderr
    assert re.search(r"npm install .*dynalite@", planned.stdout), planned.stdout


def test_make_chaos_says_how_to_get_faketime_before_it_starts(tmp_path: Path) -> None:
    """Not root (or no apt-get) and no faketime: one line saying how, and nothing run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "make", "cat", "cmp", "find", "sort", "mkdir", "mv", "rm", "test"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    result = make("faketime", env=env)
    assert result.returncode != 0
    assert "make chaos needs faketime: run 'sudo apt-get install faketime'" in result.stderr, result.stderr
    planned = make("-n", "chaos", f"VENV={tmp_path / 'venv'}")
    assert planned.returncode == 0, planned.stderr
    recipe = planned.stdout
    assert recipe.index("faketime") < recipe.index("CFN_CHAOS=full"), "faketime is checked before the suites start"


def test_the_makefile_and_the_docs_agree_on_how_long_make_bench_takes() -> None:
    makefile = re.search(r"^bench:.*\(about (\d+) min", (REPO / "Makefile").read_text(), re.M)
    performance = re.search(
        r"`make bench` runs every benchmark in one go \(about (\d+) minutes",
        (REPO / "docs" / "performance.md").read_text(),
    )
    readme = re.search(r"`make bench` runs the benchmarks \(about (\d+) minutes", (REPO / "README.md").read_text())
    assert makefile and performance and readme
    assert makefile[1] == performance[1] == readme[1]


def test_readme_says_make_test_needs_node_and_npm() -> None:
    readme = (REPO / "README.md").read_text()
    assert "`make test` also needs Node.js and npm" in readme
    assert "npm" in (REPO / ".ci" / "run").read_text()


def test_make_dist_is_a_target(tmp_path: Path) -> None:
    planned = make("-n", "dist", f"VENV={tmp_path / 'venv'}")
    assert planned.returncode == 0, planned.stderr
    assert "tools/dist.py --out dist" in planned.stdout


def _dist_tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dist_tool", REPO / "tools" / "dist.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_dist_refuses_archives_without_the_licence_or_with_tests_that_cannot_run(tmp_path: Path) -> None:
    """tools/dist.py's archive check, on archives shaped as `python -m build` makes them."""
    import io
    import tarfile
    import zipfile

    def archives(wheel_names: list[str], sdist_names: list[str]) -> tuple[Path, Path]:
        wheel, sdist = tmp_path / "p-1-py3-none-any.whl", tmp_path / "p-1.tar.gz"
        with zipfile.ZipFile(wheel, "w") as whl:
            for name in wheel_names:
                whl.writestr(name, "x")
        with tarfile.open(sdist, "w:gz") as tar:
            for name in sdist_names:
                info = tarfile.TarInfo(f"p-1/{name}")
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
        return wheel, sdist

    check = _dist_tool().archive_problems
    good = archives(["p/__init__.py", "p-1.dist-info/licenses/LICENSE"], ["LICENSE", "setup.cfg", "daemon/x.py"])
    assert check(*good) == []
    bare = archives(["p/__init__.py", "p-1.dist-info/METADATA"], ["setup.cfg", "tests/test_cli.py"])
    problems = " ".join(check(*bare))
    assert "has no .dist-info/licenses/LICENSE" in problems and "p-1.tar.gz has no LICENSE" in problems
    assert "carries tests without their conftest" in problems and "tests/test_cli.py" in problems
    assert "LICENSE" in (REPO / "setup.cfg").read_text().split("license_files =")[1].splitlines()[0]
