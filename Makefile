# `make demo` and `make test` each build the virtualenv they need from this repo's own files.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DYNALITE_VERSION := 4.0.0
# dynalite: an independent DynamoDB (npm, in memory) for tests/chaos/test_network_lies.py
DYNALITE := $(VENV)/.dynalite-$(DYNALITE_VERSION)

.PHONY: demo test chaos bench venv clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

# dynalite from npm into the virtualenv's folder ($(VENV)/node), where tests/support/dynalite.py looks
$(DYNALITE): $(STAMP)
	npm install --no-save --no-audit --no-fund --loglevel=error --prefix $(VENV)/node dynalite@$(DYNALITE_VERSION)
	touch $@

demo: $(STAMP)
	$(BIN)/cfn-provider demo

test: $(STAMP) $(DYNALITE)
	$(BIN)/pytest $(PYTEST_ARGS)

chaos: $(STAMP) $(DYNALITE)   # the chaos suites at full size, with their table of figures
	CFN_CHAOS=full $(BIN)/pytest tests/chaos -p no:cacheprovider -q $(PYTEST_ARGS)

bench: $(VENV)/.bench-installed   # the benchmarks: one table of figures beside their targets (~6 min; BENCH_ARGS=--help)
	$(BIN)/python -m bench $(BENCH_ARGS)

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,bench]'
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info
