# One-word commands. `make test` is what CI runs (.ci/run calls it).
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-dev servers test lint format bench run clean

install:            ## install hotkeyd with its native core
	$(PIP) install -q .

install-dev:        ## editable install with test/dev/bench extras; native build required
	HOTKEYD_REQUIRE_NATIVE=1 $(PIP) install -q -e '.[dev,bench]'
	HOTKEYD_REQUIRE_NATIVE=1 $(PYTHON) setup.py -q build_ext --inplace

servers:            ## redis-server and redis-tools (apt) when missing
	@command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq redis-server redis-tools)

test: servers install-dev   ## everything CI runs: native build required, lint, the suite, then the pure twins
	$(PYTHON) -c "import hotkeyd._native, hotkeyd._monitor"   # fails loudly if the C core did not build
	$(MAKE) lint
	$(PYTHON) -m pytest
	HOTKEYD_PURE_PYTHON=1 $(PYTHON) -m pytest tests/sketch tests/monitor/test_parser.py tests/monitor/test_keys.py tests/monitor/test_source.py

lint:
	ruff check hotkeyd tests benchmarks
	ruff format --check hotkeyd tests benchmarks
	mypy

format:
	ruff format hotkeyd tests benchmarks
	ruff check --fix hotkeyd tests benchmarks

bench:
	$(PYTHON) benchmarks/run_all.py

run: install        ## the main job: `hotkeyd demo` (daemon + subscriber on a live workload)
	-@command -v redis-server >/dev/null || $(MAKE) -s servers || echo "(no redis-server: the demo runs in-process)"
	hotkeyd demo

clean:
	rm -rf build dist *.egg-info hotkeyd/*.so .pytest_cache .mypy_cache
