# The two entry points a newcomer needs (see README.md): `make run` and `make test`.
# Both install what they need first, so each works on a fresh Debian 12 machine as root.

PYTHON ?= /usr/bin/python3
VENV ?= .venv
BIN := $(VENV)/bin
DEB_PACKAGES := python3 python3-venv python3-dev gcc openssl iproute2 iptables ipset conntrack \
	wireguard-tools wireguard-go etcd-server etcd-client tcpdump iputils-ping nftables
# Only the tests need these: ruby checks vagrant/Vagrantfile's syntax,
# and qemu, Debian's stock kernel and a static busybox boot the VM of tests/test_in_vm.py.
TEST_DEB_PACKAGES := ruby qemu-system-x86 linux-image-amd64 busybox-static ipvsadm

.PHONY: run test deps venv native native-built lint typecheck pytest clean kube-apiserver

run: venv native
	$(BIN)/pyfelix validate examples/
	$(BIN)/pyfelix dry-run --hostname node-a examples/
	$(BIN)/pyfelix demo examples/

test: venv lint typecheck pytest

lint: venv
	$(BIN)/ruff check src dataplane tests bench
	$(BIN)/ruff format --check src dataplane tests bench
	$(BIN)/lint-imports
	cargo fmt --check --manifest-path src/native/Cargo.toml
	PYO3_PYTHON=$(PYTHON) cargo clippy -q --release --locked --manifest-path src/native/Cargo.toml -- -D warnings

typecheck: venv
	$(BIN)/mypy

# pytest exits 5 when it collected nothing; that is a failure here, like any other non-zero code.
pytest: venv native-built .test-deps-installed kube-apiserver
	$(BIN)/pytest

# The Kubernetes API datastore's tests run a real kube-apiserver, built from the k8s.io/kubernetes
# Go module (Go >= 1.25) once and cached outside the work tree; prints the binary's path.
kube-apiserver:
	@bash tests/kube/build-apiserver.sh

# The compiled reader of dumped pods (src/native; docs/DESIGN.md says what it does and why),
# built with cargo (Rust >= 1.71, crates from crates.io) into the package. Without cargo,
# `make run` goes on with the pure path, which gives the same output more slowly on large
# dumps; `make test` stops, as its tests hold the two paths equal.
NATIVE := src/pyfelix/_native.abi3.so
NATIVE_SOURCES := src/native/Cargo.toml src/native/Cargo.lock src/native/src/lib.rs
native: $(NATIVE)
$(NATIVE): $(NATIVE_SOURCES)
	@if command -v cargo >/dev/null; then \
		PYO3_PYTHON=$(PYTHON) cargo build -q --release --locked --manifest-path src/native/Cargo.toml \
		&& cp src/native/target/release/lib_native.so $@.tmp && mv $@.tmp $@; \
	else \
		echo "cargo not found: pyfelix runs without its compiled reader (same output)"; \
	fi

native-built: native
	@test -f $(NATIVE) || { echo "make test needs cargo (Rust >= 1.71) to build src/native" >&2; exit 1; }

deps: .deps-installed
.deps-installed:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DEB_PACKAGES)
	touch $@

.test-deps-installed: .deps-installed
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(TEST_DEB_PACKAGES)
	touch $@

venv: $(BIN)/pyfelix
# The checkout's bytecode, and attrs' generated methods (pyfelix/attrs_cache.py), are compiled
# at install (pip compiles only what it copies): an agent that cannot write them (a read-only
# checkout, PYTHONDONTWRITEBYTECODE) would otherwise compile them again on every start, 0.15 s
# of it (bench/RESULTS.md).
$(BIN)/pyfelix: pyproject.toml | .deps-installed
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/python -m compileall -q src dataplane
	$(BIN)/python -c 'from pyfelix.attrs_cache import write_all; write_all()'
	touch $@

clean:
	rm -rf $(VENV) .deps-installed .test-deps-installed .mypy_cache .ruff_cache .pytest_cache \
		$(NATIVE) src/native/target
