"""Running as root: the unprivileged account the server runs as, and what that account may do.

PostgreSQL refuses to run as root, so initdb and the server run as an existing unprivileged user
(``nobody`` unless ``PGJOBS_EMBEDDED_RUN_AS``/``RUN_AS`` says otherwise) through ``subprocess``'s
user/group switching. Users are never created, permissions of existing directories are never
changed: what that user may reach is asked of the kernel, as that user.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .defaults import DEFAULT_RUN_AS, ENV_RUN_AS, ENV_SHARED_DIR
from .errors import EmbeddedPostgresError


@dataclasses.dataclass(frozen=True)
class ServerUser:
    """The account initdb and postgres run as when we are root."""

    name: str
    uid: int
    gid: int

    def popen_kwargs(self) -> dict[str, Any]:
        """Switch user and group, and drop root's supplementary groups."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def server_user(run_as: str | None = None) -> ServerUser | None:
    """``None`` when not root (the server runs as us); else the existing unprivileged user."""
    if os.geteuid() != 0:
        return None
    name = run_as or os.environ.get(ENV_RUN_AS) or DEFAULT_RUN_AS
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise EmbeddedPostgresError(
            f"PostgreSQL refuses to run as root and user {name!r} does not exist; set "
            f"{ENV_RUN_AS} to an existing unprivileged user (we never create users)."
        ) from None
    if entry.pw_uid == 0:
        raise EmbeddedPostgresError(f"{ENV_RUN_AS}={name!r} is root; PostgreSQL refuses root.")
    return ServerUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid)


def user_can(user: ServerUser | None, *checks: tuple[str, Path]) -> bool:
    """Whether ``user`` passes ``test -<flag> path`` for every check, asked *as that user*.

    Asking the kernel as the user (rather than reading mode bits) honours ACLs, groups and every
    parent directory on the way.
    """
    if user is None:
        return True
    script = " && ".join(f'test -{flag} "${i + 1}"' for i, (flag, _) in enumerate(checks))
    result = subprocess.run(
        ["/bin/sh", "-c", script, "sh", *(str(p) for _, p in checks)],
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=30,
        check=False,
        **user.popen_kwargs(),
    )
    return result.returncode == 0


def shared_base_dir() -> Path:
    """A directory owned by us that every user may traverse: root's cache and fallback data base.

    ``/var/tmp`` survives reboots (the development data should). Created 0755 by us; refused if
    someone else got there first or it is writable by others (a classic /tmp attack).
    """
    configured = os.environ.get(ENV_SHARED_DIR)
    if configured:
        base = Path(configured)
    else:
        tmp = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path(tempfile.gettempdir())
        base = tmp / f"django-pgjobs-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o755, parents=bool(configured))
    st = base.lstat()
    if not base.is_dir() or base.is_symlink() or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise EmbeddedPostgresError(
            f"{base} must be a directory owned by uid {os.geteuid()} and not writable by others"
        )
    return base
