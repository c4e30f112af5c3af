#!/usr/bin/python
# Copyright: storagelab contributors
# Apache-2.0
"""Ansible module lab_venv_lacks: what a venv lacks of a wheel's requirements, read without running pip."""
# ruff: noqa: E402  (Ansible modules put DOCUMENTATION/EXAMPLES/RETURN before the imports)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_venv_lacks
short_description: What a venv lacks of a wheel's requirements (its extra's included), without pip
description:
  - Reads the wheel's own metadata (C(Requires-Dist)) and the distributions installed in the venv, and follows
    every requirement through the installed distributions' own requirements, environment markers evaluated
    for this host's Python (the venv's), extras included.
  - Reports the requirements no installed distribution satisfies (the wheel's project itself when the venv does not
    hold its version), and the version of the wheel's project installed in the venv. Changes nothing; runs in check
    mode.
  - The roles run C(pip install) only when something lacks. A C(pip install) whose every requirement is already
    satisfied still takes pip's whole start and resolution, minutes of a slow host's CPU (an emulated one).
version_added: "0.13.0"
author: storagelab
options:
  wheel:
    description: The wheel on the host. A wheel that is not there yet (check mode, before its copy) lacks everything.
    type: path
    required: true
  extra:
    description: The extra whose requirements count too.
    type: str
    default: ""
  venv:
    description: The venv.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: What the controller's venv lacks
  lab_venv_lacks:
    wheel: /opt/storagelab/wheels/storagelab-0.13.0-py3-none-any.whl
    extra: controller
    venv: /opt/storagelab/.venv
  register: lacks
"""

RETURN = r"""
lacking:
  description: Requirements no installed distribution satisfies (C(name specifier)), sorted.
  type: list
  elements: str
  returned: always
installed:
  description: The version of the wheel's project installed in the venv, or null.
  type: str
  returned: always
"""

import glob
import os
import zipfile
from email.parser import HeaderParser
from importlib import metadata
from typing import Any

from ansible.module_utils.basic import AnsibleModule

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version
except ImportError:                      # python3-packaging: what Ansible's own pip module needs too
    Requirement = None  # type: ignore[assignment,misc]


METADATA_MAX = 1 << 20                   # a wheel's METADATA is a few KiB; more is not a wheel we built


def wheel_metadata(path: str) -> Any:
    """The wheel's METADATA headers, with Name, Version and every Requires-Dist checked readable.

    Raises ValueError naming the problem: no METADATA or more than one, one larger than METADATA_MAX, not UTF-8,
    no Name or Version, or a requirement that does not parse."""
    with zipfile.ZipFile(path) as zf:
        found = [i for i in zf.infolist() if i.filename.endswith(".dist-info/METADATA") and i.filename.count("/") == 1]
        if len(found) != 1:
            raise ValueError(f"{len(found)} .dist-info/METADATA files, not one")
        if found[0].file_size > METADATA_MAX:
            raise ValueError(f"{found[0].filename} is {found[0].file_size} bytes, over {METADATA_MAX}")
        meta = HeaderParser().parsestr(zf.read(found[0]).decode("utf-8"))
    for key in ("Name", "Version"):
        if not (meta[key] or "").strip():
            raise ValueError(f"METADATA has no {key}")
    try:
        Version(meta["Version"])
        for line in meta.get_all("Requires-Dist") or []:
            Requirement(line)
    except (InvalidRequirement, InvalidVersion) as e:
        raise ValueError(f"METADATA: {e}") from None
    return meta


def applies(req: Any, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": e}) for e in (extras or {""}))


def lacking(root: Any, extras: set[str], venv: str) -> tuple[list[str], str | None]:
    sites = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    installed = {canonicalize_name(d.metadata["Name"] or ""): d for d in metadata.distributions(path=sites)}
    own = installed.get(canonicalize_name(root["Name"]))
    missing: set[str] = set()
    todo = [(Requirement(r), extras) for r in root.get_all("Requires-Dist") or []]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, wanted = todo.pop()
        if not applies(req, wanted):
            continue
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        dist = installed.get(key[0])
        try:
            ok = dist is not None and req.specifier.contains(Version(dist.version), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok or dist is None:
            missing.add(f"{req.name}{req.specifier}")
            continue
        for line in dist.requires or []:
            try:
                todo.append((Requirement(line), set(req.extras)))
            except InvalidRequirement:
                missing.add(f"{dist.metadata['Name']}: unreadable requirement {line!r}")
    if own is None or own.version != root["Version"]:
        missing.add(f"{root['Name']}=={root['Version']}")
    return sorted(missing), None if own is None else own.version


def main() -> None:
    module = AnsibleModule(argument_spec={"wheel": {"type": "path", "required": True},
                                          "extra": {"type": "str", "default": ""},
                                          "venv": {"type": "path", "required": True}},
                           supports_check_mode=True)
    if Requirement is None:
        module.fail_json(msg="lab_venv_lacks needs python3-packaging on the host")
    wheel, venv = module.params["wheel"], module.params["venv"]
    if not os.path.isfile(wheel):
        module.exit_json(changed=False, lacking=[f"{os.path.basename(wheel)}: not on the host yet"], installed=None)
    try:
        meta = wheel_metadata(wheel)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, RuntimeError) as e:
        module.fail_json(msg=f"{wheel}: not a readable wheel: {e}")
    extras = {module.params["extra"]} if module.params["extra"] else set()
    missing, installed = lacking(meta, extras, venv)
    module.exit_json(changed=False, lacking=missing, installed=installed)


if __name__ == "__main__":
    main()
