"""Inventory values that reach a shell, a udev rule or a unit file on the lab hosts, typed before they
are used (:mod:`labcontract.inventory`); the playbooks quote them as well (playbooks/roles/lab_agent)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import Field

SAFE_CHARS = "letters, digits and . _ / : + -"
# \Z, not $: "$" also matches before a final newline ("/dev/disk/by-id/x\n" passed and broke the udev rule)
BY_ID_PATH = re.compile(r"^/dev/disk/by-id/[A-Za-z0-9._:+-]{1,200}\Z")
DEV_PATH = re.compile(r"^/dev/[A-Za-z0-9._/:+-]{1,200}\Z")
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/:+-]{0,400}\Z")
HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62})\Z")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DNS_NAME = re.compile(rf"^(?=.{{1,253}}\Z){_LABEL}(\.{_LABEL})*\Z")
Serial = Annotated[str, Field(pattern=r"^[A-Za-z0-9._:+-]{1,128}$")]
UserName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")]


def safe_path(value: str, what: str = "a path") -> str:
    """``value`` when it is an absolute path of :data:`SAFE_CHARS` without ``..``; else ValueError."""
    if not SAFE_PATH.match(value) or ".." in value:
        raise ValueError(f"{value!r}: {what} must be an absolute path of {SAFE_CHARS} (no '..')")
    return value


def host_address(value: str) -> str:
    """A DNS name or an IP address; else ValueError."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not DNS_NAME.match(value):
        raise ValueError(f"{value!r} is neither an IP address nor a DNS name")
    return value
