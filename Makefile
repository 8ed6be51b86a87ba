# `make demo` and `make test` each build the virtualenv they need from this repo's own files.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DYNALITE_VERSION := 4.0.0
# dynalite: an independent DynamoDB (npm, in memory) for tests/chaos/test_network_lies.py
DYNALITE := $(VENV)/.dynalite-$(DYNALITE_VERSION)

# The folders daemon/ and handlers/ install as the import package cfn_provider. The editable install
# is setuptools' strict mode, a tree of links to each file, which type checkers and the import
# system both see as the installed package; it is redone when the list of files changes.
SOURCES := $(VENV)/.sources
EDITABLE := --config-settings editable_mode=strict

.PHONY: demo test chaos bench venv clean FORCE

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml constraints.txt $(SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]' $(EDITABLE)
	touch $(STAMP)

$(SOURCES): FORCE
	@mkdir -p $(VENV)
	@find daemon handlers -type f -not -path '*/__pycache__/*' | sort > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

# dynalite from npm into the virtualenv's folder ($(VENV)/node), where tests/support/dynalite.py looks
$(DYNALITE): $(STAMP)
	npm install --no-save --no-audit --no-fund --loglevel=error --prefix $(VENV)/node dynalite@$(DYNALITE_VERSION)
	touch $@

demo: $(STAMP)
	$(BIN)/cfn-provider demo

test: $(STAMP) $(DYNALITE)   # type-check the installed package (setup.cfg [mypy]), then the tests
	$(BIN)/mypy -p cfn_provider
	$(BIN)/pytest $(PYTEST_ARGS)

chaos: $(STAMP) $(DYNALITE)   # the chaos suites at full size, with their table of figures
	CFN_CHAOS=full $(BIN)/pytest tests/chaos -p no:cacheprovider -q $(PYTEST_ARGS)

bench: $(VENV)/.bench-installed   # the benchmarks: one table of figures beside their targets (~6 min; BENCH_ARGS=--help)
	$(BIN)/python -m bench $(BENCH_ARGS)

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,bench]' $(EDITABLE)
	touch $@

clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis *.egg-info
