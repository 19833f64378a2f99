# Every target CI runs is here; CI calls `make test` through .ci/run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
VAL := .venv-val
STAMP := $(VENV)/.installed

.PHONY: verify-exports venv test lint typecheck pytest e2e site site-deps chromium serve example bench accuracy trace param-counts clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e . -r requirements-dev.txt
	touch $(STAMP)

## test: lint, type checks and every test (the README's test command), browser tests included
test: lint typecheck pytest e2e

lint: venv
	$(BIN)/ruff check calc tests validation/accuracy.py validation/fuzz.py benchmarks tools site
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

typecheck: venv
	$(BIN)/mypy

pytest: venv
	$(BIN)/pytest --ignore=tests/e2e

## site: the documentation site with the in-browser calculator, into build/site/ (works offline)
SITE_STAMP := $(VENV)/.site-installed
NPM_STAMP := node_modules/.installed
CHROMIUM ?= /usr/bin/chromium

site-deps: $(SITE_STAMP) $(NPM_STAMP)

$(SITE_STAMP): $(STAMP) requirements-site.txt constraints.txt
	$(BIN)/pip install -q -c constraints.txt -r requirements-site.txt
	touch $@

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# Everything the pages are computed from: a change to any of these rebuilds the site; with no
# change, `make site` (and `make serve`) reuse build/site/ instead of rebuilding it (~30 s).
SITE_SOURCES := $(shell find site calc presets tools validation benchmarks/results -type f \
	-not -path '*/__pycache__/*' -not -name '*.pyc') \
	mkdocs.yml pyproject.toml constraints.txt requirements-site.txt package-lock.json Makefile
SITE_BUILT := build/site/.built

site: $(SITE_BUILT)

$(SITE_BUILT): $(SITE_SOURCES) $(SITE_STAMP) $(NPM_STAMP)
	rm -f $@  # not in the service worker's precache list
	$(BIN)/python tools/vendor_assets.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python tools/precache.py build/site
	touch $@
	@echo "built build/site/"

## serve: the main job: build the site (if a source changed) and serve it on
## http://127.0.0.1:$(PORT)/ (PORT=8001 to use another port)
PORT ?= 8000
serve: site
	$(BIN)/python tools/serve.py build/site --port $(PORT)

## e2e: the calculator in headless Chromium (Debian's; installed with apt-get when missing)
chromium:
	@test -x "$(CHROMIUM)" || { apt-get update -qq && apt-get install -y -qq chromium; }

e2e: site chromium
	CALC_E2E_REQUIRED=1 CALC_CHROMIUM="$(CHROMIUM)" $(BIN)/pytest tests/e2e

example: venv
	@for f in examples/*.json; do echo "== $$f"; $(BIN)/calc estimate $$f; echo; done

## bench: speed of the estimator (prints numbers; not a timed test); writes
## build/bench/estimator_speed.json (the committed reference: python
## benchmarks/bench_estimate.py --out benchmarks/results/estimator_speed.json)
bench: venv
	$(BIN)/python benchmarks/bench_estimate.py

## accuracy: predicted vs traced vs published, from the committed results
accuracy: venv
	$(BIN)/python validation/accuracy.py --split all

## trace: re-trace the validation cases (needs torch; a separate environment)
$(VAL)/.installed: validation/requirements.txt
	$(PYTHON) -m venv $(VAL)
	$(VAL)/bin/pip install -q --upgrade pip
	$(VAL)/bin/pip install -q torch==2.13.0
	DS_BUILD_OPS=0 $(VAL)/bin/pip install -q -r validation/requirements.txt
	$(VAL)/bin/pip install -q --no-deps torchtitan==0.3.0  # its imports are in requirements.txt
	touch $@

trace: $(VAL)/.installed
	$(VAL)/bin/python validation/trace.py --all

## verify-exports: parse calc's framework exports with DeepSpeed, Accelerate, transformers, torchtitan
verify-exports: $(VAL)/.installed
	DS_BUILD_OPS=0 $(VAL)/bin/python validation/verify_exports.py

param-counts: $(VAL)/.installed
	$(VAL)/bin/python validation/param_counts.py --check

clean:
	rm -rf $(VENV) $(VAL) build dist vendor node_modules .mypy_cache .ruff_cache .pytest_cache

## bench-site: the site's speed in headless Chromium (cold, against a bare Pyodide page in the
## same run, repeat, long tasks, recalculation, transfer, the advisor at 1024 GPUs beside CPython);
## writes build/bench/site_speed.json and
## prints a summary (the committed reference: python benchmarks/bench_site.py --out benchmarks/results/site_speed.json)
.PHONY: bench-site
bench-site: site chromium
	CALC_CHROMIUM="$(CHROMIUM)" $(BIN)/python benchmarks/bench_site.py
