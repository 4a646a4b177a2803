"""Directories a server really cannot write, for tests of read-only configuration.

A chmod 0555 directory stops a normal user but not root, and test machines often run as
root. So as root the command runs in a mount namespace of its own (``unshare``) where the
directory is a read-only bind mount: every write fails with "read-only file system", as on
a Kubernetes ConfigMap or under systemd's ProtectSystem=strict, and the mount ends with the
process. As another user, the directories are made 0555 (permission denied). A root without
mount namespaces (a container without CAP_SYS_ADMIN) cannot have either: such tests skip,
saying why.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pytest

# $1: the tree made read-only; then the directories under it that stay writable, "--", and
# the command. The writable ones become mounts of their own first, so that the recursive
# bind carries them, and the remount makes only the top read-only.
_SCRIPT: Final = """set -e
root=$1; shift
while [ "$1" != -- ]; do mount --bind "$1" "$1"; shift; done
shift
mount --rbind "$root" "$root"
mount -o remount,bind,ro "$root"
exec "$@"
"""


def read_only(root: Path, writable: Sequence[Path] = ()) -> list[str]:
    """The argv prefix that runs a command with ``root`` read-only but for ``writable``
    (directories under it, which must exist). Empty for a non-root user, whose directories
    are made 0555 now (pytest's clean-up copes with that)."""
    if os.geteuid() != 0:
        keep = {path.absolute() for path in writable}
        for directory, names, _ in os.walk(root):
            here = Path(directory).absolute()
            names[:] = [n for n in names if here / n not in keep]
            here.chmod(0o555)
        return []
    if not mount_namespaces():
        pytest.skip("root without mount namespaces: no way to make a directory read-only here")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _SCRIPT, "sh",
            str(root), *(str(path) for path in writable), "--"]  # fmt: skip


@functools.cache
def mount_namespaces() -> bool:
    """Whether ``unshare`` gives this root a mount namespace with a read-only bind mount."""
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        probe = [*_prefix(Path(tmp)), "sh", "-c", f'! touch "{tmp}/x" 2>/dev/null']
        try:
            done = subprocess.run(probe, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0 and not Path(tmp, "x").exists()


def _prefix(root: Path) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _SCRIPT, "sh",
            str(root), "--"]  # fmt: skip
