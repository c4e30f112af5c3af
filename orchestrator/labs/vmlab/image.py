"""The VM lab's guest image: Debian 12 built from Debian's packages alone (mmdebstrap), cached by its recipe.

The recipe is everything that decides the image: the Debian suite, the packages (a lab host's kernel with the
modules this machine's lacks: nvme, dm-multipath, iscsi_tcp, target_core; systemd; openssh; python3 with venv
and apt for Ansible; fio, nvme-cli, open-iscsi, multipath-tools, targetcli-fb; redis-server and prometheus for
the controller host), the units switched off (nothing of a lab runs before a playbook asks), the guest files
(``guest/``: the boot-time identity service), the wheelhouse the playbooks install storagelab's dependencies
from (a VM has no route out) and the lab's venv with those dependencies installed ahead (a golden image: the
roles install storagelab's own wheel into it). Its SHA-256 names the cache entry; a changed recipe builds a new
image and the old ones are removed. The image is a raw ext4 file system booted directly with its own kernel and
initramfs (no boot loader); every VM writes to a qcow2 overlay of its own, so the cached image is never written.

Building needs root (mmdebstrap into a directory, chroot for systemctl), Debian's mirror, and about 1.5 GB of
disk; it takes about 5 minutes cold (docs/performance.md), nothing when cached.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from labcontract.errors import ServiceError

log = logging.getLogger(__name__)

RECIPE_VERSION = 3           # 2: the wheelhouse downloaded by the guest's own pip; 3: the venv installed ahead
SUITE = "bookworm"
GUEST_DIR = Path(__file__).resolve().parent / "guest"
IMAGE_BYTES = 6 << 30          # sparse: the tree takes about 1.4 GB, the rest is room for venvs, logs, results
KEEP_IMAGES = 2                # cached images kept (the newest), so a branch switch does not rebuild at once

PACKAGES = (
    # the host itself
    "linux-image-amd64", "systemd-sysv", "udev", "kmod", "dbus", "openssh-server", "iproute2", "procps", "sudo",
    "less", "ca-certificates", "iputils-ping",
    # what Ansible and the playbooks use on a host: python3 with apt (the apt module) and venv (the pip module)
    "python3", "python3-apt", "python3-venv", "python3-packaging",
    # a DUT host's tools: fio, nvme-cli, smartctl, the interlock's wipefs / lsblk / blkid, mkfs, ACLs
    "fio", "nvme-cli", "smartmontools", "util-linux", "e2fsprogs", "xfsprogs", "acl", "sg3-utils", "hdparm",
    "sysstat",
    # the network tests on the kernel's stack: LIO (targetcli), open-iscsi, dm-multipath, libiscsi's iscsi-perf
    "open-iscsi", "multipath-tools", "targetcli-fb", "python3-rtslib-fb", "libiscsi-bin", "ethtool",
    # the controller host's services (roles lab_redis, lab_prometheus)
    "redis-server", "prometheus",
)
# enabled by their packages; a playbook enables what its host runs
DISABLED_UNITS = (
    "redis-server.service", "prometheus.service", "multipathd.service", "multipathd.socket", "open-iscsi.service",
    "iscsid.socket", "rtslib-fb-targetctl.service", "smartmontools.service", "nvmefc-boot-connections.service",
    "nvmf-autoconnect.service", "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer",
    "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer", "systemd-networkd-wait-online.service",
)
ENABLED_UNITS = ("vmlab-config.service", "systemd-networkd.service", "ssh.service")
MASKED_UNITS = ("serial-getty@ttyS0.service", "getty@tty1.service")
GUEST_FILES = {          # path in the image -> (file under guest/, mode)
    "usr/local/sbin/vmlab-config": ("vmlab-config", 0o755),
    "etc/systemd/system/vmlab-config.service": ("vmlab-config.service", 0o644),
}
WHEELS_IN_IMAGE = "srv/storagelab/wheels"      # lab_*_pip_extra_args: --no-index --find-links /srv/storagelab/wheels
# lab_controller_venv and lab_agent_venv (their defaults), with every wheel of the wheelhouse installed ahead: a golden
# image. The roles then install storagelab's own wheel into it; without it, each deploy spent 10 minutes of the
# guest's emulated CPU on pip byte-compiling the same 5,560 files (docs/vmlab.md, "The image")
VENV_IN_IMAGE = "opt/storagelab/.venv"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TOOLS = ("mmdebstrap", "mkfs.ext4", "qemu-img", "qemu-system-x86_64")


@dataclass(frozen=True)
class Image:
    """A built guest image: its root file system, kernel and initramfs."""

    root: Path
    kernel: Path
    initrd: Path
    recipe: str                 # the recipe's SHA-256
    build_s: float | None       # seconds this call spent building it; None: it was cached


def recipe(requirements: Sequence[str]) -> dict[str, object]:
    """What decides the image (its SHA-256 names the cache entry)."""
    files = {dest: hashlib.sha256((GUEST_DIR / src).read_bytes()).hexdigest() + f":{mode:o}"
             for dest, (src, mode) in sorted(GUEST_FILES.items())}
    return {"version": RECIPE_VERSION, "suite": SUITE, "packages": sorted(PACKAGES),
            "disabled": sorted(DISABLED_UNITS), "enabled": sorted(ENABLED_UNITS), "masked": sorted(MASKED_UNITS),
            "files": files, "wheels": sorted(requirements), "venv": VENV_IN_IMAGE, "bytes": IMAGE_BYTES}


def recipe_hash(requirements: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(recipe(requirements), sort_keys=True).encode()).hexdigest()


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


@contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One builder at a time per cache (test workers and a `labctl lab up --vms` may start together)."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def project_requirements(checkout: Path) -> list[str]:
    """What a lab host installs of the checkout's project (the agent's base and the controller extra): the
    requirement lines of its pyproject.toml, for the image's wheelhouse."""
    import tomllib

    project = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["controller"]]


def ensure_image(cache: Path, requirements: Sequence[str], constraints: Path) -> Image:
    """The image of this recipe, built now unless the cache holds it. ``requirements`` (pip requirement lines) and
    ``constraints`` make the wheelhouse (:func:`_wheelhouse`)."""
    digest = recipe_hash([*requirements, hashlib.sha256(constraints.read_bytes()).hexdigest()])
    final = cache / f"image-{digest[:16]}"
    with _locked(cache):
        if (final / "ready").exists():
            return _image(final, digest, None)
        missing = missing_tools()
        if missing:
            raise ServiceError(f"the VM lab needs {', '.join(missing)} (make vmtest installs qemu-system-x86, "
                               "qemu-utils and mmdebstrap)")
        started = time.monotonic()
        work = cache / f"build-{digest[:16]}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            _build(work, requirements, constraints)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        shutil.rmtree(final, ignore_errors=True)
        os.replace(work, final)
        (final / "ready").write_text(json.dumps(recipe(requirements), indent=1) + "\n")
        _prune(cache, keep=final)
        took = time.monotonic() - started
        log.info("guest image %s built in %.0f s", final.name, took)
        return _image(final, digest, took)


def _image(d: Path, digest: str, took: float | None) -> Image:
    return Image(root=d / "root.img", kernel=d / "vmlinuz", initrd=d / "initrd.img", recipe=digest, build_s=took)


def _run(argv: Sequence[str], what: str, **kw: object) -> None:
    res = subprocess.run(list(argv), capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
        raise ServiceError(f"{what} failed (exit {res.returncode}): {' '.join(argv)[:300]}\n{tail}")


def _build(work: Path, requirements: Sequence[str], constraints: Path) -> None:
    tree = work / "tree"
    log.info("building the guest image (mmdebstrap %s, %d packages)", SUITE, len(PACKAGES))
    _run(["mmdebstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE, str(tree)],
         "mmdebstrap", timeout=1800)
    _wheelhouse(tree, requirements, constraints)
    for dest, (src, mode) in GUEST_FILES.items():
        target = tree / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(GUEST_DIR / src, target)
        target.chmod(mode)
    (tree / "etc" / "fstab").write_text("/dev/vda / ext4 rw,relatime 0 1\n")
    (tree / "etc" / "hostname").write_text("vmlab\n")
    chroot = ["chroot", str(tree), "systemctl"]
    _run([*chroot, "disable", *DISABLED_UNITS], "disabling units")
    _run([*chroot, "enable", *ENABLED_UNITS], "enabling units")
    _run([*chroot, "mask", *MASKED_UNITS], "masking units")
    _run([*chroot, "set-default", "multi-user.target"], "the default target")
    boot = tree / "boot"
    kernel = max(boot.glob("vmlinuz-*"))
    initrd = boot / kernel.name.replace("vmlinuz-", "initrd.img-")
    shutil.copyfile(kernel, work / "vmlinuz")
    shutil.copyfile(initrd, work / "initrd.img")
    root = work / "root.img"
    with root.open("wb") as fh:
        fh.truncate(IMAGE_BYTES)
    _run(["mkfs.ext4", "-q", "-F", "-L", "vmlab-root", "-d", str(tree), str(root)], "mkfs.ext4", timeout=1800)
    shutil.rmtree(tree)


def _wheelhouse(tree: Path, requirements: Sequence[str], constraints: Path) -> None:
    """The wheels storagelab's install needs, downloaded by the guest's own pip in the image's chroot: Debian 12's
    CPython (3.11.2) decides the environment markers (redis needs async-timeout below 3.11.3, which this
    machine's CPython did not download)."""
    build = tree / "tmp" / "wheelhouse"
    build.mkdir(parents=True)
    (build / "requirements.txt").write_text("\n".join(requirements) + "\n")
    shutil.copyfile(constraints, build / "constraints.txt")
    # this machine's trust store (a proxy's CA included), not the image's: the download is this machine's
    shutil.copyfile(ssl.get_default_verify_paths().cafile or HOST_CA_BUNDLE, build / "ca.pem")
    (tree / WHEELS_IN_IMAGE).mkdir(parents=True)
    inside = "/tmp/wheelhouse"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k not in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")}
    env |= {"SSL_CERT_FILE": f"{inside}/ca.pem", "REQUESTS_CA_BUNDLE": f"{inside}/ca.pem"}
    _run(["chroot", str(tree), "python3", "-m", "venv", f"{inside}/venv"], "the wheelhouse's venv")
    _run(["chroot", str(tree), f"{inside}/venv/bin/pip", "download", "-q", "--disable-pip-version-check",
          "--only-binary=:all:", "-d", "/" + WHEELS_IN_IMAGE,
          "-c", f"{inside}/constraints.txt", "-r", f"{inside}/requirements.txt"],
         "the wheelhouse's download", timeout=1800, env=env)
    # in the chroot: the guest's CPython byte-compiles with this machine's CPU, not the emulated one
    _run(["chroot", str(tree), "python3", "-m", "venv", "/" + VENV_IN_IMAGE], "the image's venv")
    _run(["chroot", str(tree), f"/{VENV_IN_IMAGE}/bin/pip", "install", "-q", "--disable-pip-version-check",
          "--no-index", "--find-links", "/" + WHEELS_IN_IMAGE,
          "-c", f"{inside}/constraints.txt", "-r", f"{inside}/requirements.txt"],
         "the image's venv install", timeout=1800, env=env)
    shutil.rmtree(build)


def _prune(cache: Path, keep: Path) -> None:
    """The newest KEEP_IMAGES images stay; older ones and abandoned builds go."""
    images = sorted((d for d in cache.glob("image-*") if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
    for d in [d for d in images if d != keep][KEEP_IMAGES - 1:]:
        shutil.rmtree(d, ignore_errors=True)
    for d in cache.glob("build-*"):
        shutil.rmtree(d, ignore_errors=True)
