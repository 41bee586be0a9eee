# The two commands of the README. Both set up everything on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The modules mypyc compiles (the list is disq/_native.py's), built in place beside their
# sources. Make rebuilds them when any of them, the list or setup.py is newer than the last
# build, so a test run after an edit runs fresh compiled code (disq/_native.py also refuses
# stale ones at import). DISQ_PURE=1 make ...: no compiled modules.
NATIVE_SRC := $(shell $(PY) -c "import runpy; print(' '.join(runpy.run_path('disq/_native.py')['compiled_sources']('.').values()))")
COMPILED := $(VENV)/.compiled

.PHONY: run test lint typecheck clean bench build screenshots

# The editable install itself compiles nothing (DISQ_PURE=1): $(COMPILED) does, with the
# venv's mypy, once, and writes the bytecode of every module (a node's start reads it rather
# than compiling its sources, even where PYTHONDONTWRITEBYTECODE is set). The editable
# install is a plain path entry (compat mode): setuptools' default import hook costs every
# Python start some 20 ms. setuptools calls compat mode transitional: once a release drops
# it, the default mode is installed instead.
$(STAMP): pyproject.toml setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	DISQ_PURE=1 $(BIN)/pip install -q -e '.[dev]' --config-settings editable_mode=compat \
		|| DISQ_PURE=1 $(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

PURE := $(filter-out 0,$(DISQ_PURE))

$(COMPILED): $(STAMP) setup.py disq/_native.py $(NATIVE_SRC)
	$(if $(PURE),,scripts/ensure_compiler.sh $(BIN)/python)
	$(BIN)/python setup.py -q build_ext --inplace >$(VENV)/build.log 2>&1 \
		|| { cat $(VENV)/build.log; exit 1; }
	@grep '^disq setup.py' $(VENV)/build.log || true
	$(BIN)/python -m compileall -q -j0 disq disq_kombu_alias.py >/dev/null
	$(if $(PURE),,touch $(COMPILED))

build: $(COMPILED)

run: $(COMPILED)
	$(BIN)/disq-node

lint: $(STAMP)
	$(BIN)/ruff check disq tests scripts cluster bench setup.py disq_kombu_alias.py
	$(BIN)/ruff format --check disq disq_kombu_alias.py
	$(BIN)/lint-imports --no-cache --no-logo

typecheck: $(STAMP)
	$(BIN)/mypy

# The whole suite against the compiled modules (DISQ_EXPECT_COMPILED: tests/unit/test_native.py
# fails unless they loaded), slow tests included; then the unit tests once more against the
# pure Python sources, but for the slow ones (the simulator's long sweeps: the same logic the
# compiled run just swept, at twice the time; the 20-minute budget of a CI run on 2 cores).
# The sweeps both runs make take half of their seeds each (DISQ_SIM_SHARE, tests/unit/
# sim_share.py): together every seed once, each build half of them.
# pytest-xdist runs test files side by side (--dist loadfile: a module's fixtures stay in one
# worker): most of the suite waits on real processes, timers and sockets, so 4 workers keep
# 2 cores busy. Each worker takes ports of its own (cluster/ports.py). The install test runs
# alone after them: its builds (mypyc and gcc over 77 modules, twice) hold both cores for
# minutes, and beside the Spark and timing tests they starved the nodes into timeouts.
test: $(COMPILED) lint typecheck
	scripts/tree_state.sh save $(VENV)/.tree-before-test
	scripts/ensure_redis_cli.sh
	scripts/ensure_redis_py7.sh
	scripts/ensure_java.sh
	scripts/ensure_chromium.sh
	scripts/ensure_kombu_suite.sh
	scripts/ensure_faketime.sh
	scripts/ensure_lazyfs.sh >/dev/null || echo "LazyFS not built: the power-loss test skips"
	$(if $(PURE),,DISQ_EXPECT_COMPILED=1) DISQ_SIM_SHARE=0/2 $(BIN)/pytest -q -p no:cacheprovider \
		-n 4 --dist loadfile --durations=15 --ignore=tests/integration/test_install.py tests
	$(BIN)/pytest -q -p no:cacheprovider tests/integration/test_install.py
	DISQ_PURE=1 DISQ_SIM_SHARE=1/2 $(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadfile \
		-m "not slow" tests/unit
	scripts/ensure_beanstalkd.sh
	DISQ_TEST_SERVER=beanstalkd $(BIN)/pytest -q -p no:cacheprovider \
		tests/integration/test_beanstalk_wire.py tests/integration/test_clients.py
	scripts/tree_state.sh check $(VENV)/.tree-before-test

# The README's dashboard pictures: the browser test's latest screenshots (build/screenshots,
# written by tests/integration/test_dashboard_browser.py) copied over docs/screenshots.
screenshots:
	cp build/screenshots/dashboard-*.png docs/screenshots/

bench: $(STAMP)
	$(BIN)/python -m bench beanstalk

clean:
	rm -rf $(VENV) disq-data .mypy_cache .ruff_cache build disq/_native_build.json
	find disq -name '*.so' -delete
	rm -f disq__mypyc.*.so
