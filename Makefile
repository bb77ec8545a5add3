# The two commands of the quick start: `make run` and `make test`. Everything else is a convenience.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
STAMP := $(VENV)/.installed
# Every package of pyproject.toml's dependencies and dev extra, pinned with its hashes (`make lock` writes it).
LOCK := requirements.lock
ENGINE_BUILT := engine/compiled.sha256
ENGINE_SOURCES := $(wildcard engine/*.py)

.PHONY: run test bench chaos lint typecheck migrate clean-venv lock venv

$(STAMP): $(LOCK) pyproject.toml client/pyproject.toml
	@test -x $(PY) || { rm -rf $(VENV); $(PYTHON) -m venv $(VENV); }
	# The lock pins pip itself too: the same installer everywhere.
	$(PY) -m pip install --quiet --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps -e .
	# The runtime client (its own distribution, client/, standard library only): tests/client import it and
	# run its example.
	$(PY) -m pip install --quiet --no-deps -e ./client
	@touch $(STAMP)

# The engine's hot modules compiled with mypyc from the same source, in place, where a C compiler exists
# (without one it says so and the engine stays pure Python); again whenever the engine changes. The list:
# engine/compiled.py.
$(ENGINE_BUILT): $(STAMP) compile_engine.py $(ENGINE_SOURCES)
	$(PY) compile_engine.py

venv: $(ENGINE_BUILT)

# After a change to pyproject.toml's dependencies: pins each to the newest version that fits, keeping the
# lock's pins where they still fit (`make lock PIP_COMPILE_ARGS=--upgrade` moves them all).
lock: $(STAMP)
	$(VENV)/bin/pip-compile --quiet --extra dev --generate-hashes --strip-extras --allow-unsafe \
	  --no-emit-index-url --no-emit-find-links $(PIP_COMPILE_ARGS) -o $(LOCK) pyproject.toml

migrate: $(ENGINE_BUILT)
	$(PY) manage.py migrate --noinput

run: $(ENGINE_BUILT)
	PORT=$(PORT) $(PY) manage.py run_all --port $(PORT)

test: $(ENGINE_BUILT)
	$(PY) -m ruff check .
	# The layers import downward only (.importlinter; docs in README's "Where things are").
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m mypy
	# The TypeScript client (client-ts/): installed from its lock file, built with tsc --strict, its own tests
	# (the contract's vectors among them) on Node's test runner. Without Node.js it says so and goes on.
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  set -e; cd client-ts; echo "== client-ts on node $$(node --version)"; \
	  npm ci --no-audit --no-fund --loglevel=error; npx tsc -p tsconfig.json; node --test dist/test/*.test.js; \
	else \
	  echo "SKIPPED: client-ts (the TypeScript client) was not tested: node and npm are not on PATH (install Node.js 20+)"; \
	fi
	# A throwaway var/ per run: tests that commit publish tasks to the filesystem broker, which must not
	# leak into the var/ that `make run` serves from. The tests run on one worker per core, at most four
	# (pytest-xdist; each worker has its own test database, var/ and Redis database: tests/worker_rooms.py).
	# Each worker takes a stretch of the suite and, when done, takes tests from the end of another's, so
	# each runs its tests in the suite's order: pytest-django's, the tests that empty the database after
	# those that read what the migrations wrote. PYTEST_ARGS=-n0 runs them in one process.
	d=$$(mktemp -d) && LOOPX_VAR_DIR=$$d $(PY) -m pytest -p no:cacheprovider -n auto --maxprocesses 4 \
	  --dist worksteal $(PYTEST_ARGS); rc=$$?; rm -rf $$d; exit $$rc

bench: $(ENGINE_BUILT)
	$(PY) -m benchmarks $(BENCH_ARGS)

chaos: $(ENGINE_BUILT)
	$(PY) manage.py chaos --seeds $${SEEDS:-500}

lint: $(ENGINE_BUILT)
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(ENGINE_BUILT)
	$(PY) -m mypy

clean-venv:
	rm -rf $(VENV)
