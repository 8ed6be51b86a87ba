"""Where the running cfn-provider was installed from: the requirement a scaffolded project names.

cfn-sns-provider is not on a package index yet, so `init` cannot name it by name alone: a project
depends on what this `cfn-provider` came from, as pip recorded it (PEP 610's direct_url.json):

- a checkout (`make venv`, `pip install -e .`): `cfn-sns-provider @ file:///path/to/checkout`;
- a wheel file (`pip install dist/cfn_sns_provider-VERSION-py3-none-any.whl`): `... @ file:///...whl`;
- by name (from a wheelhouse with `--find-links`, or an index): `cfn-sns-provider==VERSION`, and
  pip needs that same place again (the note says so).

Once it is released, the plain `cfn-sns-provider>=VERSION` is the form to keep (the scaffold's
pyproject.toml shows it beside the one it uses).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata

DISTRIBUTION = "cfn-sns-provider"


@dataclass(frozen=True)
class Source:
    """The requirement naming where this cfn-provider came from, and the sentence that says so."""

    url: str | None  # file:///... for a checkout or a wheel; None when pip installed it by name
    version: str
    said: str

    def requirement(self, extra: str = "") -> str:
        """PEP 508: `cfn-sns-provider[extra] @ URL`, or `cfn-sns-provider[extra]==VERSION`."""
        name = f"{DISTRIBUTION}[{extra}]" if extra else DISTRIBUTION
        return f"{name} @ {self.url}" if self.url else f"{name}=={self.version}"

    def released(self, extra: str = "") -> str:
        """The form to use once the package is on an index."""
        name = f"{DISTRIBUTION}[{extra}]" if extra else DISTRIBUTION
        return f"{name}>={self.version}"


def running() -> Source:
    """Where the cfn-sns-provider this interpreter imports was installed from."""
    found = list(metadata.distributions(name=DISTRIBUTION))  # a build's egg-info in the working folder too
    recorded = [(d, text) for d in found if (text := d.read_text("direct_url.json"))]
    dist, text = recorded[0] if recorded else (found[0] if found else metadata.distribution(DISTRIBUTION), None)
    return from_direct_url(text, dist.version)


def from_direct_url(text: str | None, version: str) -> Source:
    """The Source pip's direct_url.json (or its absence) describes."""
    try:
        recorded = json.loads(text) if text else {}
    except ValueError:
        recorded = {}
    url = recorded.get("url") if isinstance(recorded, dict) else None
    if not isinstance(url, str) or not url.startswith("file://"):
        return Source(
            None,
            version,
            f"cfn-sns-provider {version} as installed here, by name (from a wheelhouse or an index): "
            "pip needs that same place to install the project (e.g. --find-links dist/wheelhouse)",
        )
    if "dir_info" in recorded:
        return Source(url, version, f"cfn-sns-provider from the checkout cfn-provider runs from ({url})")
    return Source(url, version, f"cfn-sns-provider from the file cfn-provider was installed from ({url})")


def install_hint(extra: str) -> str:
    """The pip command that adds `extra` to this cfn-provider, from where it came from (by name: the
    extra's own requirements, read from the installed metadata, never the name on an index)."""
    source = running()
    if source.url is None:
        marker = re.compile(rf"""^([^;]+);\s*extra\s*==\s*["']{re.escape(extra)}["']\s*$""")
        wanted = [m[1].strip() for r in metadata.requires(DISTRIBUTION) or [] if (m := marker.match(r))]
        return "pip install " + " ".join(f"'{r}'" for r in wanted)
    path = source.url.removeprefix("file://")
    if source.url.endswith(".whl"):
        return f"pip install '{path}[{extra}]'"
    return f"pip install -e '{path}[{extra}]'"
