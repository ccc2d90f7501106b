# Two commands set up a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV := $(BIN)/uv

.PHONY: test test-fast test-latest lock chaos lint demo sandbox screenshot apt-note browser postgres sshd prometheus run bench clean

# Every install comes from a committed lock with hashes (locks/): a fresh clone gets exactly what CI tested.
# uv (itself pinned, with hashes, in locks/uv.txt) installs them; plain pip can install the same files
# (`pip install --require-hashes -r locks/dev.txt`). opsloop itself goes in editable, without build isolation,
# using the locked setuptools: nothing unpinned is fetched.
$(STAMP): pyproject.toml locks/dev.txt locks/uv.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r locks/uv.txt
	$(UV) pip install --quiet --python $(BIN)/python --require-hashes -r locks/dev.txt
	$(UV) pip install --quiet --python $(BIN)/python --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Refresh the locks from the ranges in pyproject.toml (and locks/uv.in): the newest versions they allow,
# for every platform and Python 3.11+. Commit the result; `make test` then installs exactly it.
LOCK := $(UV) pip compile --quiet --generate-hashes --universal --python-version 3.11 --custom-compile-command "make lock"
lock: $(STAMP)
	$(LOCK) --upgrade locks/uv.in -o locks/uv.txt
	$(LOCK) --upgrade pyproject.toml -o locks/run.txt
	$(LOCK) --upgrade pyproject.toml --extra dev -o locks/dev.txt
	$(LOCK) --upgrade pyproject.toml --extra dev --extra bench -o locks/bench.txt

# The suite on the newest versions pyproject.toml's ranges allow, ignoring the lock, in a venv of its own:
# drift found on purpose (then `make lock`), not by a red CI on a fresh clone.
LATEST := .venv-latest
test-latest: $(STAMP) apt-note browser postgres sshd prometheus
	test -x $(LATEST)/bin/python || $(PY) -m venv $(LATEST)
	$(UV) pip install --quiet --python $(LATEST)/bin/python --upgrade --resolution highest -e '.[dev]'
	$(LATEST)/bin/python -m pip list --format=freeze 2>/dev/null | grep -iE '^(anthropic|slack|aiohttp|sqlite-utils|structlog|asyncssh|google-re2|psycopg)' || true
	$(LATEST)/bin/python -m pytest $(PYTEST)

# The whole suite, spread over TEST_WORKERS processes by pytest-xdist (each with its own Postgres databases
# and random ports; worksteal: an idle worker takes tests queued for a busy one, the minute-long ones included);
# -rfEs lists failures, errors and every skip with its reason. Two workers a core: a third of the suite waits on
# child processes, servers and clocks, so a core's second worker runs while the first waits (2,641 tests on
# 2 cores: 478 s with 2 workers, 377 s with 4, 426 s with 6).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) * 2 )))
PYTEST := -q -rfEs -n $(TEST_WORKERS) --dist worksteal
test: $(STAMP) apt-note browser postgres sshd prometheus
	$(BIN)/python -m pytest $(PYTEST)

# The loop to run every few minutes: no processes, no real servers (tests/support/markers.py marks those) and none of the
# tests marked `slow` (each a second or more, paced by the clock); under 90 s on 2 cores. `make test` runs them all.
# One worker a core here: these tests only compute, and a second worker a core slows them (63 s vs 86 s).
FAST_WORKERS ?= $(shell nproc 2>/dev/null || echo 1)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -rfEs -n $(FAST_WORKERS) --dist worksteal -m "not processes and not servers and not slow"

# The long crash test: 200 runs of `opsloop run` SIGKILLed at chosen and random points (seed printed;
# replay one with CHAOS_SEED=...). `make test` runs its short, fixed-seed version.
CHAOS_RUNS ?= 200
chaos: $(STAMP)
	$(BIN)/python -m pytest -q -s tests/e2e/test_crash.py --chaos-runs=$(CHAOS_RUNS) $(if $(CHAOS_SEED),--chaos-seed=$(CHAOS_SEED))

# What CI checks first (and .pre-commit-config.yaml before a commit): lint, formatting, strict types.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict bot tools handlers

demo: $(STAMP)
	$(BIN)/opsloop demo

sandbox: $(STAMP)
	$(BIN)/opsloop sandbox

# docs/sandbox.png: the demo incident played in the sandbox by headless Chromium.
screenshot: $(STAMP) browser
	$(BIN)/python -m bot.playground.sandbox.screenshot docs/sandbox.png

# What each install target below looks for: when it is there, the target installs nothing.
HAVE_BROWSER = command -v chromium >/dev/null && command -v chromedriver >/dev/null
HAVE_PG = { command -v initdb && command -v pg_ctl; } >/dev/null \
  || ls /usr/lib/postgresql/*/bin/initdb /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1
HAVE_SSH = { command -v sshd || test -x /usr/sbin/sshd; } >/dev/null && command -v ssh-keygen >/dev/null && command -v zsh >/dev/null
HAVE_PROM = command -v prometheus >/dev/null && { command -v prometheus-alertmanager || command -v alertmanager; } >/dev/null

# One line before `make test` installs anything: the Debian packages it is about to install (those missing), or,
# without root or passwordless sudo, that it installs none and the tests needing them will skip.
apt-note:
	@missing=; \
	$(HAVE_BROWSER) || missing="$$missing $(BROWSER_PKGS)"; \
	$(HAVE_PG) || missing="$$missing $(PG_PKGS)"; \
	$(HAVE_SSH) || missing="$$missing $(SSH_PKGS)"; \
	$(HAVE_PROM) || missing="$$missing $(PROM_PKGS)"; \
	if [ -z "$$missing" ] || ! command -v apt-get >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] || { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then \
	  echo "make test: installing with apt-get, as root, for the real-server tests:$$missing"; \
	else echo "make test: not root and no passwordless sudo: not installing$$missing; the tests needing them will skip"; fi

# Headless Chromium for the sandbox's browser test and `make screenshot`, from Debian's packages: installed
# with apt-get when missing and possible (root or passwordless sudo). Never fails the build: without it the
# browser test skips and says what is missing.
BROWSER_PKGS := chromium chromium-driver fonts-noto-color-emoji
# Every install below: no Recommends (they pulled in node-exporter), and no service started by a package script
# (a temporary policy-rc.d that says 101, removed after); the units the packages enable are disabled again
# (the tests start their own servers on loopback). $(call NO_SERVICES,units) then the packages.
NO_SERVICES = sh -c 'units=$$1; shift; p=/usr/sbin/policy-rc.d; ours=; \
  if [ ! -e $$p ]; then printf "\043!/bin/sh\nexit 101\n" > $$p && chmod 755 $$p && ours=1; fi; \
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$$@"; rc=$$?; \
  if [ -n "$$ours" ]; then rm -f $$p; fi; \
  if command -v systemctl >/dev/null; then for u in $$units; do systemctl disable --quiet $$u 2>/dev/null; done; fi; \
  exit $$rc' no-services "$(1)"
APT_INSTALL = $(call NO_SERVICES,) $(BROWSER_PKGS)
browser:
	@if $(HAVE_BROWSER); then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "browser: no apt-get here; the browser test will skip"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "browser: not root and no passwordless sudo; the browser test will skip"; exit 0; fi; \
	echo "browser: installing $(BROWSER_PKGS) with apt-get"; \
	$$SUDO $(APT_INSTALL) >/dev/null 2>&1 \
	  || { $$SUDO apt-get update -qq >/dev/null 2>&1 && $$SUDO $(APT_INSTALL) >/dev/null 2>&1; } \
	  || echo "browser: apt-get could not install $(BROWSER_PKGS); the browser test will skip"

# Postgres 15+ binaries (initdb, pg_ctl, postgres) for the tests' throwaway server (tests/support/pgserver.py), from
# Debian's packages: installed with apt-get when missing and possible (root or passwordless sudo). Never fails
# the build: without them the Postgres tests skip and say what is missing.
PG_PKGS := postgresql
PG_INSTALL = $(call NO_SERVICES,postgresql) $(PG_PKGS)
postgres:
	@if $(HAVE_PG); then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "postgres: no apt-get here; the Postgres tests will skip"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "postgres: not root and no passwordless sudo; the Postgres tests will skip"; exit 0; fi; \
	echo "postgres: installing $(PG_PKGS) with apt-get"; \
	$$SUDO $(PG_INSTALL) >/dev/null 2>&1 \
	  || { $$SUDO apt-get update -qq >/dev/null 2>&1 && $$SUDO $(PG_INSTALL) >/dev/null 2>&1; } \
	  || echo "postgres: apt-get could not install $(PG_PKGS); the Postgres tests will skip"

# OpenSSH's server and client for the host tools' tests (tests/support/sshserver.py starts a throwaway sshd on loopback),
# from Debian's packages, the same way, and zsh (a login shell the remote command is checked under, beside sh, bash
# and dash). Never fails the build: without them the SSH tests skip and say why.
SSH_PKGS := openssh-server openssh-client zsh
SSH_INSTALL = $(call NO_SERVICES,ssh) $(SSH_PKGS)
sshd:
	@if $(HAVE_SSH); then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "sshd: no apt-get here; the SSH tests will skip"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "sshd: not root and no passwordless sudo; the SSH tests will skip"; exit 0; fi; \
	echo "sshd: installing $(SSH_PKGS) with apt-get"; \
	$$SUDO $(SSH_INSTALL) >/dev/null 2>&1 \
	  || { $$SUDO apt-get update -qq >/dev/null 2>&1 && $$SUDO $(SSH_INSTALL) >/dev/null 2>&1; } \
	  || echo "sshd: apt-get could not install $(SSH_PKGS); the SSH tests will skip"

# Prometheus and Alertmanager for the alert tests (tests/support/promserver.py runs them on loopback), from Debian's
# packages, the same way. Never fails the build: without them the real-server alert tests skip and say why.
PROM_PKGS := prometheus prometheus-alertmanager
PROM_INSTALL = $(call NO_SERVICES,prometheus prometheus-alertmanager prometheus-node-exporter) $(PROM_PKGS)
prometheus:
	@if $(HAVE_PROM); then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "prometheus: no apt-get here; the real-server alert tests will skip"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "prometheus: not root and no passwordless sudo; the real-server alert tests will skip"; exit 0; fi; \
	echo "prometheus: installing $(PROM_PKGS) with apt-get"; \
	$$SUDO $(PROM_INSTALL) >/dev/null 2>&1 \
	  || { $$SUDO apt-get update -qq >/dev/null 2>&1 && $$SUDO $(PROM_INSTALL) >/dev/null 2>&1; } \
	  || echo "prometheus: apt-get could not install $(PROM_PKGS); the real-server alert tests will skip"

run: $(STAMP)
	$(BIN)/opsloop run $(if $(CONFIG),--config $(CONFIG))

# Writes bench/RESULTS.md (and growth.png, PROFILE.md); installs the peers it compares against first.
bench: $(STAMP)
	$(UV) pip install --quiet --python $(BIN)/python --require-hashes -r locks/bench.txt
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(LATEST) .pytest_cache .mypy_cache .ruff_cache
