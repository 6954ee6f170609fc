# The two commands a newcomer needs: `make run` and `make test`. Both create .venv and install
# what they need on a machine that has only python3 and make.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check -q
PYTEST_ARGS ?=
# Test processes (pytest-xdist): more than the cores, since most tests wait on sockets and child
# processes. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 4
# Python caches compiled modules in __pycache__, and pytest its rewritten test modules: every test
# process, and every server or tool a test starts, then imports lbauth without compiling it again
# (0.7 s a process on a 2-core machine). Some environments turn that off with PYTHONDONTWRITEBYTECODE;
# the tests turn it back on.
TEST_ENV := PYTHONDONTWRITEBYTECODE=
PYTEST := $(TEST_ENV) $(BIN)/python -m pytest
# The files holding the tests marked `alone`, so that their run collects only those files.
ALONE_FILES = $(if $(PYTEST_ARGS),,$(shell grep -l 'mark\.alone' tests/test_*.py))

.PHONY: run test install lint clean bench soak debian-tools node-packages

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Stamps: reinstall only when the package metadata changes.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(PIP) install -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[test]'
	touch $@ $(VENV)/.installed-run

install: $(VENV)/.installed-run

## run: serve lbauth on http://127.0.0.1:8000 with an embedded SQLite database in ./var,
##      creating (once) and printing a demo user and demo app.
run: $(VENV)/.installed-run
	LBAUTH_ENV=$${LBAUTH_ENV:-development} $(BIN)/lbauth demo
	LBAUTH_ENV=$${LBAUTH_ENV:-development} exec $(BIN)/lbauth serve

## test: the whole suite, on SQLite and on PostgreSQL (LBAUTH_TEST_POSTGRES_URL, default
##       postgresql+asyncpg://postgres@127.0.0.1:5432/test; skipped if unreachable unless CI=true).
##       The browser tests need Debian's chromium, the second-factor tests its oathtool (installed
##       here when run as root; skipped without them unless CI=true). The Node tests need node and
##       tests/package.json's packages (installed here with npm; skipped without node unless CI=true).
##       On a CPU-starved machine (4 test processes on 2 cores) a client's connect timeout can
##       expire while a server waits for the CPU: failed tests run once more, fewer at a time, and
##       fail the suite only if they fail again.
##       The tests marked `alone` (a database outage answered within a second) run afterwards in
##       one process, on a quiet machine. They time sub-second answers with half-second connect
##       timeouts: on a CPU-starved machine one can miss by scheduling alone, so a failed one runs
##       once more (`--lf`) and fails the suite only if it fails again. Exit status 5 is pytest's
##       "no test selected": with a PYTEST_ARGS that selects only one kind, the other run has
##       nothing to do.
test: $(VENV)/.installed-test debian-tools node-packages
	$(TEST_ENV) $(BIN)/python -m compileall -q lbauth
	$(PYTEST) -n $(TEST_WORKERS) --dist worksteal --durations=30 -m "not alone" $(PYTEST_ARGS) \
		|| [ $$? = 5 ] \
		|| { echo "Some tests failed: running the failed ones once more, on a quieter machine"; \
		     $(PYTEST) -n 2 -m "not alone" --lf --lfnf=none $(PYTEST_ARGS); }
	$(PYTEST) --durations=10 -m alone $(ALONE_FILES) $(PYTEST_ARGS) || [ $$? = 5 ] \
		|| { echo "An outage test failed: running the failed ones once more"; \
		     $(PYTEST) --durations=10 -m alone --lf --lfnf=none $(ALONE_FILES) $(PYTEST_ARGS); }

# Debian's tools for the tests: chromium for the browser tests (never `playwright install`), and
# oathtool for TOTP codes from an implementation that is not lbauth's. As root with apt-get, install
# the missing ones in one go, once more after `apt-get update` if that fails (like ensure_wrk in
# tools/bench_http.py); otherwise say so and go on (their tests are skipped, and fail under CI=true).
DEBIAN_TOOLS := chromium oathtool
debian-tools:
	@missing=""; for tool in $(DEBIAN_TOOLS); do [ -x /usr/bin/$$tool ] || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "Installing Debian's$$missing for the tests"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null 2>&1 \
			|| { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } \
			|| echo "Could not install$$missing: the tests that need them will be skipped (they fail under CI=true)"; \
		else \
			echo "Missing$$missing (apt-get install$$missing as root): the tests that need them will be skipped (they fail under CI=true)"; \
		fi; \
	fi

# The test suite's Node packages (tests/package.json, exact versions from tests/package-lock.json),
# from the npm registry, when npm exists; again only when either file changes (the stamp).
NODE_STAMP := tests/node_modules/.installed
node-packages: $(NODE_STAMP)
$(NODE_STAMP): tests/package.json tests/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		echo "Installing the tests' Node packages (npm ci in tests/)"; \
		(cd tests && npm ci --no-audit --no-fund --loglevel=error) && touch $@ \
		|| echo "npm ci failed: the Node tests will be skipped (they fail under CI=true)"; \
	else \
		echo "npm is missing: the Node tests will be skipped (they fail under CI=true)"; \
	fi

## lint: ruff; the import rules of setup.cfg [importlinter] (lint-imports); mypy on the core and
## storage (every function typed; pyproject.toml [tool.mypy])
lint: $(VENV)/.installed-test
	$(PIP) install ruff
	$(BIN)/ruff check lbauth tests tools
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m mypy lbauth/core lbauth/storage

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache tests/node_modules

## bench: the benchmarks (tools/bench.py); writes bench-results.json. BENCH_ARGS=--quick for a short run.
BENCH_ARGS ?=
bench: $(VENV)/.installed-test
	$(BIN)/python tools/bench.py $(BENCH_ARGS)

## soak: 5 minutes of mixed traffic at 80% of the measured peak, on SQLite then PostgreSQL:
##       zero errors, workers' memory growth under 10%, p99 stable (tools/soak.py; SOAK_ARGS)
soak: $(VENV)/.installed-test
	$(BIN)/python tools/soak.py $(SOAK_ARGS)
