"""cfn_provider.editable: a module added to the checkout after `make venv` says "run make venv", not
"No module named ...". The editable install is built here as setuptools' strict mode builds it (a
folder of links per package) from a small source tree of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cfn_provider
from cfn_provider import editable


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """src/pkg (the checkout: pkg, pkg.a, pkg.sub) and site/pkg (its strict editable install: links)."""
    src, site = tmp_path / "src" / "pkg", tmp_path / "site" / "pkg"
    for rel in ("__init__.py", "a.py", "sub/__init__.py", "py.typed"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("VALUE = 1\n")
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).symlink_to(src / rel)
    return src, site


def test_an_up_to_date_install_misses_nothing_and_a_new_module_or_package_is_missing(tmp_path: Path):
    src, site = _tree(tmp_path)
    assert editable.missing(site) == []
    (src / "b.py").write_text("")
    (src / "sub" / "c.py").write_text("")
    (src / "newsub").mkdir()
    (src / "newsub" / "__init__.py").write_text("")
    (src / "notes").mkdir()  # a folder that is no package, and files that are no modules, are not missed
    (src / "README.txt").write_text("")
    assert editable.missing(site) == [src / "b.py", src / "newsub", src / "sub" / "c.py"]


def test_importing_a_module_the_install_lacks_says_run_make_venv(tmp_path: Path):
    src, site = _tree(tmp_path)
    (src / "b.py").write_text("")
    (src / "sub" / "c.py").write_text("")
    script = textwrap.dedent(f"""
        import sys
        from cfn_provider import editable
        sys.path.insert(0, {str(site.parent)!r})
        editable.watch("pkg", {str(site / "__init__.py")!r})
        import pkg.a, pkg.sub                          # linked: imported as usual
        for name in ("pkg.b", "pkg.sub.c", "pkg.nowhere"):
            try:
                __import__(name)
            except ModuleNotFoundError as exc:
                print(name, type(exc).__name__, exc.name, "make venv" in str(exc))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "pkg.b StaleInstall pkg.b True",
        "pkg.sub.c StaleInstall pkg.sub.c True",
        "pkg.nowhere ModuleNotFoundError pkg.nowhere False",  # not in the checkout either: the usual error
    ]


def test_a_plain_install_gets_no_finder(tmp_path: Path):
    (tmp_path / "__init__.py").write_text("")
    before = list(sys.meta_path)
    editable.watch("plain", str(tmp_path / "__init__.py"))
    assert sys.meta_path == before


def test_this_package_watches_itself_exactly_when_it_is_an_editable_install():
    watching = any(getattr(f, "package", None) == "cfn_provider" for f in sys.meta_path)
    assert watching == os.path.islink(cfn_provider.__file__)
