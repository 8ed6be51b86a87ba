# `make demo` and `make test` each build the virtualenv they need from this repo's own files.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test chaos bench venv clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/cfn-provider demo

test: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

chaos: $(STAMP)   # the chaos suites at full size, with their table of figures
	CFN_CHAOS=full $(BIN)/pytest tests/chaos -p no:cacheprovider -q $(PYTEST_ARGS)

bench: $(VENV)/.bench-installed   # the benchmarks: one table of figures beside their targets (~6 min; BENCH_ARGS=--help)
	$(BIN)/python -m bench $(BENCH_ARGS)

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,bench]'
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info
