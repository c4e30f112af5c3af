# Two commands on a fresh Debian 12 machine:
#   make demo   installs what is missing, then runs the embedded one-machine lab
#   make test   the same install plus dev dependencies, then the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LAB_DIR ?= $(CURDIR)/.lab
# more labctl demo options, e.g. DEMO_ARGS="--notify-file /tmp/runs.jsonl" (kept in the lab file's [notify])
DEMO_ARGS ?=
# the Ansible collections of requirements.yml (ansible-core carries ansible.builtin only); playbooks/ansible.cfg's
# collections_path names this directory, so it is fixed
COLLECTIONS := $(CURDIR)/collections
# test modules run on this many workers (pytest-xdist, a module's tests stay together): most tests wait on fio,
# services and conditions, so three workers on two CPUs keep both busy (docs/performance.md, "The test suite");
TEST_JOBS ?= 3
DEMO_PKGS := fio redis-server util-linux python3-venv
# the VM tier (make vmtest, docs/vmlab.md): QEMU, the image builder, SSH into the guests
VM_PKGS := qemu-system-x86 qemu-utils mmdebstrap openssh-client iproute2 openssl
TEST_PKGS := $(DEMO_PKGS) postgresql prometheus iproute2 openssh-server openssh-client tgt libiscsi-bin nbdkit e2fsprogs python3-apt stress-ng openssl acl faketime systemd chromium mariadb-server sysbench xfsprogs ioping

.PHONY: demo test test-deps test-pts vmtest bench-vmlab lint typecheck unit integration bench system-deps system-test-deps vm-deps collections wheel clean

demo: system-deps $(VENV)/.installed $(COLLECTIONS)/.installed
	$(VENV)/bin/labctl --lab-dir $(LAB_DIR) demo $(DEMO_ARGS)

# everything make test and make vmtest need, installed once (.ci/run runs the two one after the other after it)
test-deps: system-test-deps vm-deps $(VENV)/.dev-installed $(COLLECTIONS)/.installed

test: system-test-deps $(VENV)/.dev-installed $(COLLECTIONS)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -n $(TEST_JOBS) --dist loadfile tests

# The VM tier: real hosts as QEMU guests (their own kernel, systemd, NVMe controllers, dm-multipath) on a private
# network namespace; site.yml deploys onto them. The guest image is built once from Debian's packages and cached
# in $(VMLAB_CACHE) (about 2 GB). Under TCG (no nested KVM) it takes 23 to 28 minutes on 2 CPUs alone, 32 to 37
# beside make test; .ci/run runs it after make test, without its network module (.ci/run says why).
# the built-in snia-iops (56 cells) and snia-latency on the embedded lab, their reports in Chromium: .ci/run runs
# it after make test (two minutes past make test's budget)
test-pts: system-test-deps $(VENV)/.dev-installed
	$(VENV)/bin/pytest --pts-full tests/integration/test_pts_lab.py -k "snia-iops or snia-latency"

VMLAB_CACHE ?= $(HOME)/.cache/storagelab/vmlab
vmtest: system-test-deps vm-deps $(VENV)/.dev-installed $(COLLECTIONS)/.installed
	STORAGELAB_VMLAB_CACHE=$(VMLAB_CACHE) $(VENV)/bin/pytest --vmlab tests/vmlab $(VMTEST_ARGS)

unit: $(VENV)/.dev-installed
	$(VENV)/bin/pytest tests/unit

integration: system-test-deps $(VENV)/.dev-installed $(COLLECTIONS)/.installed
	$(VENV)/bin/pytest tests/integration

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: system-test-deps $(VENV)/.installed
	$(PY) -m bench.overhead
	$(PY) -m bench.pattern125
	$(PY) -m bench.telemetry
	$(PY) -m bench.report
	$(PY) -m bench.apps
	$(PY) -m bench.web
	$(PY) -m bench.repeatability

# the VM lab (root, QEMU; the image cached by make vmtest): an Ansible task on a TCG guest, default vs Mitogen
bench-vmlab: system-test-deps vm-deps $(VENV)/.dev-installed
	$(PY) -m bench.vmlab

system-deps:
	@scripts/ensure-packages $(DEMO_PKGS)

system-test-deps:
	@scripts/ensure-packages $(TEST_PKGS)

vm-deps:
	@scripts/ensure-packages $(VM_PKGS)

# The project's base install is the agent's alone (a lab host: pip install storagelab); the controller,
# labctl and the demo lab need the controller extra, the tests the dev extra too (docs/deployment.md).
$(VENV)/.installed: pyproject.toml constraints.txt labcontract/version.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[controller]'
	@# a venv made before requirements.yml carries the whole ansible package (470 MB of collections): dropped
	@if $(PY) -m pip show -q ansible >/dev/null 2>&1; then \
	  $(PY) scripts/install_collections.py requirements.yml $(COLLECTIONS) && $(PY) -m pip uninstall -q -y ansible; fi
	@touch $@

$(VENV)/.dev-installed: $(VENV)/.installed
	$(PY) -m pip install -q -c constraints.txt -e '.[controller,dev]'
	@touch $@

# the collections the playbooks use (requirements.yml): from Ansible Galaxy, else out of the ansible release
# on PyPI that bundles the pinned versions (scripts/install_collections.py); nothing is fetched once installed
collections: $(COLLECTIONS)/.installed

$(COLLECTIONS)/.installed: requirements.yml scripts/install_collections.py | $(VENV)/.installed
	$(PY) scripts/install_collections.py requirements.yml $(COLLECTIONS)
	@touch $@

# the wheel lab hosts install (site.yml: the agents, and the controller host with the controller extra):
# dist/storagelab-<version>-py3-none-any.whl
wheel: $(VENV)/.installed
	$(PY) -m pip wheel -q --no-deps -w dist .

clean:
	rm -rf $(VENV) $(COLLECTIONS) .lab .pytest_cache .mypy_cache .ruff_cache build
