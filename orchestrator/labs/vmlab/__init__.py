"""A lab of virtual hosts on one machine (docs/vmlab.md): QEMU guests of a Debian 12 image built from Debian's
packages, with their own kernel, systemd, emulated NVMe controllers and kernel multipath, on a private network
namespace. :mod:`.image` builds and caches the image, :mod:`.net` the namespace's segments, :mod:`.vm` one VM
(its hardware, QEMU process, QMP monitor, SSH), :mod:`.lab` a lab of them and its Ansible inventory."""
