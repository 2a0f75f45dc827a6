"""Which host names in a log name different machines.

Question: how many hosts does a log show, and which machine does a loopback name stand for?

Domain facts relied on:
- A loopback name (`localhost`, `localhost.localdomain`, `ip6-localhost`, 127.0.0.0/8, `::1`)
  names the machine that wrote it, whichever that is. Launchers write one where they need no
  network name: torchrun's single-node rendezvous (`--standalone`: localhost, master_addr
  127.0.0.1), and torch elastic's ChildFailedError record (`host : socket.getfqdn()`), which is
  "localhost" on machines whose /etc/hosts maps their own name to 127.0.0.1 — while NCCL's lines
  on that same machine carry gethostname()'s name.
- So a loopback name is never a host of its own beside a named one: the hosts of a log are its
  named hosts; the loopback names count only when the log names no host at all. Where the log
  names exactly one host, a loopback name is that host.
"""
from __future__ import annotations

import re
from typing import Iterable

_LOOPBACK = re.compile(r"(?i)^(?:localhost(?:\.localdomain)?[46]?|ip6-(?:localhost|loopback)|127(?:\.\d{1,3}){3}|::1|\[::1\])$")


def is_loopback(name: str | None) -> bool:
    return bool(name) and _LOOPBACK.match(str(name).strip()) is not None


def distinct(names: Iterable[str | None]) -> list[str]:
    """The log's hosts, sorted: its named hosts, or — when it names none — its loopback name(s)
    as one host (they are all the one machine that wrote them)."""
    seen = {str(n) for n in names if n}
    named = sorted(h for h in seen if not is_loopback(h))
    if named:
        return named
    return sorted(seen)[:1]


def resolve(name: str | None, names: Iterable[str | None]) -> str | None:
    """The machine `name` stands for among the log's host names: a loopback name is the log's one
    named host when it names exactly one; any other name is itself."""
    if not is_loopback(name):
        return name
    named = distinct(names)
    return named[0] if len(named) == 1 and not is_loopback(named[0]) else name
