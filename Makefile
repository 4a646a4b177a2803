# Two commands matter: `make run` and `make test`. Both create .venv when it is missing.
# `make pipeline` / `make tls`: add that extra to .venv, the checkout still installed editable.
# `make dist`: the sdist and a wheel built from it in dist/, for `pip install dist/...whl`.
ARGS ?=
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NODE_DIR := tests/peers/node
C_SOURCES := src/pynamesrv/namesrv/_fastpath.c src/pynamesrv/namesrv/_routed.c

CHROMIUM := /usr/bin/chromium

# The extras a user adds to the checkout's .venv (`make pipeline`, `make tls`).
EXTRAS := pipeline tls

.PHONY: run test lint bench docs dist clean $(EXTRAS)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamp files make a second `make` skip installs until the package definition or a C loop
# changes (pip builds them; without a C compiler pynamesrv runs the Python twins).
$(VENV)/.installed-run: pyproject.toml setup.py $(C_SOURCES) | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml setup.py $(C_SOURCES) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,peers,pipeline]'
	touch $@

# Editable, as `make run` installs the checkout: `pip install '.[pipeline]'` would replace
# that install with a copy, and later edits in the checkout would be silently ignored.
$(EXTRAS:%=$(VENV)/.installed-%): $(VENV)/.installed-%: pyproject.toml setup.py $(C_SOURCES) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[$*]'
	touch $@

$(EXTRAS): %: $(VENV)/.installed-%

$(NODE_DIR)/node_modules/.installed: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	npm ci --prefix $(NODE_DIR) --no-audit --no-fund --loglevel=error
	touch $@

# The status-page test drives Debian's chromium; Playwright's own browser download cannot
# run on these machines. Needs root (CI and the dev machines have it).
$(CHROMIUM):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# `make run ARGS="--port 9877 --http-port 9881"`: ARGS go to `pynamesrv serve`.
run: $(VENV)/.installed-run
	$(BIN)/pynamesrv serve $(ARGS)

test: $(VENV)/.installed-test $(NODE_DIR)/node_modules/.installed $(CHROMIUM)
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

# Each prints its figures next to a reference measured in the same run (see README).
bench: $(VENV)/.installed-test
	for b in route_query register storm memory partial_frames pipelined_answers slow_readers journal restart pipeline pipeline_warmup acl_check http_search; do \
		$(BIN)/python bench/$$b.py || exit 1; \
	done

# dist/pynamesrv-VERSION.tar.gz and the wheel built from it (so the sdist is proven complete).
# With a C compiler and Python's headers (gcc, python3-dev) the wheel is platform-specific and
# carries the compiled loops; without, it is py3-none-any and runs their slower Python twins:
# the last line says which.
dist: | $(BIN)/python
	$(BIN)/pip install --quiet 'build>=1'
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	@if ls dist/*-py3-none-any.whl >/dev/null 2>&1; then \
		echo "NOTE: no C compiler or Python headers: dist/ holds a pure-Python wheel; pynamesrv"; \
		echo "      runs the slower Python twins of its compiled loops (install gcc and python3-dev,"; \
		echo "      then make dist again for the platform wheel)."; \
	else \
		echo "dist/: sdist and a platform wheel with the compiled loops (fastpath, routed)"; \
	fi

# Regenerate docs/configuration.md from the key table (a test checks it is current).
docs: $(VENV)/.installed-run
	$(BIN)/python -c 'from pynamesrv.namesrv.config import reference_markdown as r; print(r(), end="")' > docs/configuration.md

clean:
	rm -rf $(VENV) $(NODE_DIR)/node_modules .pytest_cache .mypy_cache build dist
