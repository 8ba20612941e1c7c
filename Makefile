# Two entry points, both self-installing on a fresh machine:
#   make demo   the main job on the embedded default (SQLite file, offline, no tokens)
#   make test   lint, types, then the whole suite on SQLite and on PostgreSQL (and on
#               Citus too when a local cluster answers: scripts/citus start)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CITUS_PORT ?= $(or $(MEMSYNC_CITUS_PORT),9700)
# Which databases the suite runs on; CI runs all three (.ci/run starts the Citus cluster).
TEST_DATABASES ?= sqlite postgresql $(shell pg_isready -q -h 127.0.0.1 -p $(CITUS_PORT) 2>/dev/null && echo citus)
PYTEST_ARGS ?=

.PHONY: demo test lint bench install clean citus

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/memsync demo

lint: $(BIN)/.installed
	$(BIN)/ruff check memsync tests bench
	$(BIN)/ruff format --check memsync tests bench
	$(BIN)/mypy

test: lint
	@for db in $(TEST_DATABASES); do \
	  echo "== test suite on $$db"; \
	  $(BIN)/pytest --db=$$db $(PYTEST_ARGS) || exit $$?; \
	done

# A local Citus cluster (a coordinator and two workers), built from the vendored source
# the first time; `make test` then runs the suite on it too.
citus:
	scripts/citus start

# Benchmarks print Markdown tables; results and method live in docs/benchmarks.md.
# bench.citus prints one line and goes on when no Citus cluster answers (scripts/citus).
bench: $(BIN)/.installed
	$(BIN)/python -m bench.ingest
	$(BIN)/python -m bench.compile
	$(BIN)/python -m bench.small_compile
	$(BIN)/python -m bench.context_after_change
	$(BIN)/python -m bench.sync
	$(BIN)/python -m bench.connectors
	$(BIN)/python -m bench.jobs
	$(BIN)/python -m bench.read_path
	$(BIN)/python -m bench.http_stack
	$(BIN)/python -m bench.single_write
	$(BIN)/python -m bench.busy_thread_rows
	$(BIN)/python -m bench.busy_thread_ids
	$(BIN)/python -m bench.one_of
	$(BIN)/python -m bench.cli
	$(BIN)/python -m bench.citus

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
