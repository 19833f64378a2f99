# Every target CI runs is here; CI calls `make test` through .ci/run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
VAL := .venv-val
STAMP := $(VENV)/.installed

.PHONY: venv test lint typecheck pytest serve example bench accuracy trace param-counts clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e . -r requirements-dev.txt
	touch $(STAMP)

## test: lint, type checks and every test (the README's test command)
test: lint typecheck pytest

lint: venv
	$(BIN)/ruff check calc tests validation/accuracy.py benchmarks

typecheck: venv
	$(BIN)/mypy

pytest: venv
	$(BIN)/pytest

## serve: the main job. Until the site lands (issue 3): the CLI on the example scenarios.
serve: example

example: venv
	@for f in examples/*.json; do echo "== $$f"; $(BIN)/calc estimate $$f; echo; done

## bench: speed of the estimator (prints numbers; not a timed test)
bench: venv
	$(BIN)/python benchmarks/bench_estimate.py

## accuracy: predicted vs traced vs published, from the committed results
accuracy: venv
	$(BIN)/python validation/accuracy.py

## trace: re-trace the validation cases (needs torch; a separate environment)
$(VAL)/.installed: validation/requirements.txt
	$(PYTHON) -m venv $(VAL)
	$(VAL)/bin/pip install -q --upgrade pip
	$(VAL)/bin/pip install -q torch==2.13.0
	$(VAL)/bin/pip install -q -r validation/requirements.txt
	touch $@

trace: $(VAL)/.installed
	$(VAL)/bin/python validation/trace.py --all

param-counts: $(VAL)/.installed
	$(VAL)/bin/python validation/param_counts.py --check

clean:
	rm -rf $(VENV) $(VAL) build dist .mypy_cache .ruff_cache .pytest_cache
