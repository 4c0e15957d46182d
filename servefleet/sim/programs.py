"""Finding the system programs the fleet runs (sshd, dockerd, ip, debootstrap, …)."""

from __future__ import annotations

import shutil

from servefleet.core.errors import SimError

SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def find_program(name: str) -> str:
    """Absolute path of ``name``, looking in the sbin folders too (PATH may lack them)."""
    found = shutil.which(name) or shutil.which(name, path=SBIN_PATH)
    if found is None:
        raise SimError(f"{name} not found: install it (scripts/bootstrap installs the Debian "
                       "packages openssh-server, docker.io, debootstrap, iproute2)")
    return found
