"""Find and remove sandboxes that probes left behind (a probe killed hard cannot clean up).

Every sandbox a probe creates carries the project's label: its run, its creation time and its
owner (``host:pid`` of the probing process). A sandbox is stale when its owner is a process of
this host that no longer runs, or when it is older than a given age (owners elsewhere cannot be
checked). ``simrollout cleanup BACKEND`` lists and removes them; every probe sweeps them first.

>>> s = Owned("c1", "run1", created=0.0, owner="otherhost:1")
>>> s.age(now=7200.0)
7200.0
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

DEFAULT_MAX_AGE = 6 * 3600.0  # a probe sandbox lives minutes; one this old is left over
TTL = 3600.0  # server-side limit on a probe sandbox's life, where the backend has one


def owner() -> str:
    """This process, as recorded on the sandboxes it creates."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Owned:
    """A sandbox carrying the project's label."""

    id: str
    run: str
    created: float  # unix time, s (0 when unknown)
    owner: str  # host:pid of the probe that created it

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.created

    def owner_alive(self) -> bool | None:
        """True/False when the owner is a process of this host; None when it cannot be told."""
        host, _, pid = self.owner.rpartition(":")
        if host != socket.gethostname() or not pid.isdigit():
            return None
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stale(self, max_age: float, now: float | None = None) -> bool:
        alive = self.owner_alive()
        if alive is False:
            return True
        return alive is None and self.age(now) > max_age


def sweep_stale(backend, max_age: float = DEFAULT_MAX_AGE, dry_run: bool = False) -> tuple[list, list]:
    """``(every labelled sandbox, the stale ones removed)`` (or that would be, with ``dry_run``)."""
    found = backend.owned()
    stale = [s for s in found if s.stale(max_age)]
    if not dry_run:
        for s in stale:
            backend.remove_owned(s)
    return found, stale
