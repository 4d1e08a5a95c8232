# Two front-door commands; each creates .venv and installs what it needs first.
#   make app    set up and run the app on the embedded default models (http://127.0.0.1:7860)
#   make test   set up and run every test (installs test tools and a headless Chromium if missing)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: app test setup setup-dev browser cli bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip

$(VENV)/.runtime: requirements.txt | $(PY)
	$(PY) -m pip install -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt requirements.txt $(VENV)/.runtime
	$(PY) -m pip install -r requirements-dev.txt
	touch $@

setup: $(VENV)/.runtime
setup-dev: $(VENV)/.dev

browser: setup-dev
	bash scripts/ensure-browser.sh

app: setup
	$(PY) app.py $(ARGS)

test: setup-dev browser
	$(PY) -m pytest $(PYTEST_ARGS)

cli: setup
	$(PY) -m specdec generate --prompt "Write a Python function that checks whether a number is prime."

bench: setup
	bash scripts/install-llama-cpp.sh $(PY)
	$(PY) -m benchmarks.throughput $(ARGS)
	$(PY) -m benchmarks.report

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
