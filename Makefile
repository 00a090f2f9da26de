# Strata: the two commands of the quick start.
#   make run    set up (packages, venv) and run the appliance in the foreground (Ctrl-C stops it)
#   make test   set up, then run the whole test suite
#   make soak   the 30-minute soak: mixed load with faults (bench/soak.py)
DATA_DIR ?= var
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: setup run test bench soak clean

setup:
	@./scripts/setup.sh

run: setup
	.venv/bin/strata --data-dir $(DATA_DIR) up --host $(HOST) --port $(PORT)

test: setup
	.venv/bin/python tests/run_suite.py $(PYTEST_ARGS)

bench: setup
	.venv/bin/pip install -q -e '.[test,bench]'
	for b in bench/*.py; do [ $$b = bench/soak.py ] && continue; grep -q '^if __name__ == "__main__"' $$b || continue; .venv/bin/python $$b || exit 1; done

# 30 minutes of mixed load with faults (bench/soak.py); `make bench` leaves it out
SOAK_MINUTES ?= 30
soak: setup
	.venv/bin/python bench/soak.py --minutes $(SOAK_MINUTES) --record

clean:
	rm -rf .venv .pytest_cache test-output
