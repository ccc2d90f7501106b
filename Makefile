# Two commands set up a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test chaos lint demo sandbox screenshot browser postgres run bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP) browser postgres
	$(BIN)/python -m pytest -q

# The long crash test: 200 runs of `opsloop run` SIGKILLed at chosen and random points (seed printed;
# replay one with CHAOS_SEED=...). `make test` runs its short, fixed-seed version.
CHAOS_RUNS ?= 200
chaos: $(STAMP)
	$(BIN)/python -m pytest -q -s tests/test_crash.py --chaos-runs=$(CHAOS_RUNS) $(if $(CHAOS_SEED),--chaos-seed=$(CHAOS_SEED))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy --strict bot
	$(BIN)/mypy tools handlers

demo: $(STAMP)
	$(BIN)/opsloop demo

sandbox: $(STAMP)
	$(BIN)/opsloop sandbox

# docs/sandbox.png: the demo incident played in the sandbox by headless Chromium.
screenshot: $(STAMP) browser
	$(BIN)/python -m bot.sandbox.screenshot docs/sandbox.png

# Headless Chromium for the sandbox's browser test and `make screenshot`, from Debian's packages: installed
# with apt-get when missing and possible (root or passwordless sudo). Never fails the build: without it the
# browser test skips and says what is missing.
BROWSER_PKGS := chromium chromium-driver fonts-noto-color-emoji
APT_INSTALL := env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PKGS)
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "browser: no apt-get here; the browser test will skip"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "browser: not root and no passwordless sudo; the browser test will skip"; exit 0; fi; \
	echo "browser: installing $(BROWSER_PKGS) with apt-get"; \
	$$SUDO $(APT_INSTALL) >/dev/null 2>&1 \
	  || { $$SUDO apt-get update -qq >/dev/null 2>&1 && $$SUDO $(APT_INSTALL) >/dev/null 2>&1; } \
	  || echo "browser: apt-get could not install $(BROWSER_PKGS); the browser test will skip"

# Postgres 15+ binaries (initdb, pg_ctl, postgres) for the tests' throwaway server (tests/pgserver.py), from
# Debian's packages: installed with apt-get when missing and possible (root or passwordless sudo). Never fails
# the build: without them the Postgres tests skip and say what is missing.
PG_PKGS := postgresql
PG_INSTALL := env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(PG_PKGS)
postgres:
	@if { command -v initdb && command -v pg_ctl; } >/dev/null \
	  || ls /usr/lib/postgresql/*/bin/initdb /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "postgres: no apt-get here; the Postgres tests will skip"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "postgres: not root and no passwordless sudo; the Postgres tests will skip"; exit 0; fi; \
	echo "postgres: installing $(PG_PKGS) with apt-get"; \
	$$SUDO $(PG_INSTALL) >/dev/null 2>&1 \
	  || { $$SUDO apt-get update -qq >/dev/null 2>&1 && $$SUDO $(PG_INSTALL) >/dev/null 2>&1; } \
	  || echo "postgres: apt-get could not install $(PG_PKGS); the Postgres tests will skip"

run: $(STAMP)
	$(BIN)/opsloop run

# Writes bench/RESULTS.md (and growth.png, PROFILE.md); installs the peers it compares against first.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
