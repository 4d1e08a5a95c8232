# Two front-door commands; each creates .venv and installs what it needs first.
#   make app    set up and run the app on the embedded default models (http://127.0.0.1:7860)
#   make test   set up and run every test (installs test tools and a headless Chromium if missing)
# More: make test-fast (tiny-model tests only, minutes), make mutants (plant bugs, check the
# fast tests catch each), make notebooks (open them in Jupyter), make notebooks-html (run each once and
# write its page with its figures, for the app's links), make bench, make cli.
# Each target, and the app's flags (make app ARGS="--port 8000"): docs/guide.md#setting-up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: preflight app test test-fast mutants notebooks notebooks-html strip-notebooks setup setup-dev browser cli bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip

# The package's build compiles specdec's C++ kernels against the torch just installed (hence no
# build isolation); without a compiler it installs without them and says so at run time.
$(VENV)/.runtime: requirements.txt pyproject.toml setup.py specdec/model/csrc/qlinear.cpp | $(PY)
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps --no-build-isolation -e .
	touch $@

$(VENV)/.dev: requirements-dev.txt requirements.txt $(VENV)/.runtime
	$(PY) -m pip install -r requirements-dev.txt
	touch $@

setup: $(VENV)/.runtime
setup-dev: $(VENV)/.dev

browser: setup-dev
	$(PY) -m benchmarks.chromium --ensure

# Warns up front (with the numbers) when memory or disk is short for a first run; never stops it.
preflight:
	@$(PYTHON) scripts/preflight.py

app: preflight setup
	$(PY) app.py $(ARGS)

test: setup-dev browser
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup-dev
	$(PY) -m pytest -m "not real and not browser" $(PYTEST_ARGS)

mutants: setup-dev
	$(PY) scripts/mutants.py $(ARGS)

# Opens the notebooks in Jupyter (SPECDEC_NOTEBOOK_BUDGET=full for the full measurements).
notebooks: setup-dev
	$(PY) -m pip install -q notebook==7.6.5
	$(PY) -m jupyter notebook notebooks/

# Runs each notebook once on a fresh kernel and writes it as a page with its figures to notebooks/html/,
# which the app links (make test writes the same pages as it runs them). SPECDEC_NOTEBOOK_BUDGET as above.
notebooks-html: setup-dev
	$(PY) scripts/render_notebooks.py $(ARGS)

# Outputs stay out of git: run before committing a notebook.
strip-notebooks: setup-dev
	$(PY) scripts/strip_notebooks.py notebooks/*.ipynb

cli: setup
	$(PY) -m specdec generate --prompt "Write a Python function that checks whether a number is prime."

bench: setup
	bash scripts/install-llama-cpp.sh $(PY)
	bash scripts/build-llama-speculative.sh $(PY)
	$(PY) -m benchmarks.throughput $(ARGS)
	$(PY) -m benchmarks.report

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
