# The two commands of the README. Both set up everything on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck clean bench

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/disq-node

lint: $(STAMP)
	$(BIN)/ruff check disq tests scripts cluster
	$(BIN)/ruff format --check disq
	$(BIN)/lint-imports --no-cache --no-logo

typecheck: $(STAMP)
	$(BIN)/mypy

test: $(STAMP) lint typecheck
	scripts/ensure_redis_cli.sh
	scripts/ensure_redis_py7.sh
	scripts/ensure_java.sh
	scripts/ensure_chromium.sh
	$(BIN)/pytest -q -p no:cacheprovider tests
	scripts/ensure_beanstalkd.sh
	DISQ_TEST_SERVER=beanstalkd $(BIN)/pytest -q -p no:cacheprovider \
		tests/integration/test_beanstalk_wire.py tests/integration/test_clients.py

bench: $(STAMP)
	$(BIN)/python scripts/bench_beanstalk.py

clean:
	rm -rf $(VENV) disq-data .mypy_cache .ruff_cache
