"""Which project a development server belongs to: the one whose settings module is in use.

Two checkouts on one machine (two projects, or two clones of one) must not share a development
server: one's ``migrate`` would write into the other's database and one's ``pgembedded stop``
would stop the other's server. So the default data directory is keyed by the project as well as
by the user: by the directory of the Django settings module (``DJANGO_SETTINGS_MODULE``), which
differs between checkouts, and named after that module so a person can tell which is which.
Settings configured without a module (``settings.configure()``) fall back to the current
directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path

ENV_SETTINGS = "DJANGO_SETTINGS_MODULE"


@dataclasses.dataclass(frozen=True)
class Project:
    """A settings module (or, without one, a directory) and where it lives."""

    name: str
    directory: Path

    @property
    def key(self) -> str:
        """``<name>-<12 hex digits of the directory's hash>``: one directory name per project."""
        digest = hashlib.sha256(os.fsencode(self.directory)).hexdigest()[:12]
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", self.name).strip("._")[:40] or "project"
        return f"{name}-{digest}"

    def __str__(self) -> str:
        return f"{self.name} ({self.directory})"


def _module_file(module: str) -> str | None:
    """The file of ``module``, preferably without importing anything (it usually is loaded)."""
    loaded = sys.modules.get(module)
    if getattr(loaded, "__file__", None):
        return loaded.__file__  # type: ignore[union-attr]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.has_location else None


def current_project() -> Project:
    """The project of this process: its settings module's directory, else the current directory."""
    module = os.environ.get(ENV_SETTINGS)
    origin = _module_file(module) if module else None
    if module and origin:
        return Project(name=module, directory=Path(origin).resolve().parent)
    cwd = Path.cwd().resolve()
    return Project(name=cwd.name or "project", directory=cwd)
