# Strata: the two commands of the quick start.
#   make run    set up (packages, venv) and run the appliance in the foreground (Ctrl-C stops it)
#   make test   set up, then run the whole test suite
DATA_DIR ?= var
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: setup run test bench clean

setup:
	@./scripts/setup.sh

run: setup
	.venv/bin/strata --data-dir $(DATA_DIR) up --host $(HOST) --port $(PORT)

test: setup
	.venv/bin/python tests/run_suite.py $(PYTEST_ARGS)

bench: setup
	.venv/bin/pip install -q -e '.[test,bench]'
	for b in bench/*.py; do grep -q '^if __name__ == "__main__"' $$b || continue; .venv/bin/python $$b || exit 1; done

clean:
	rm -rf .venv .pytest_cache test-output
