PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast lint typecheck demo bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest -q

# The fast tier: pure logic, the simulator and the mypy cases; no PostgreSQL is started.
test-fast: $(STAMP)
	$(BIN)/pytest -q tests/unit tests/typing

demo: $(STAMP)
	$(BIN)/python examples/demo.py

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet dbos pgqueuer py-spy
	$(BIN)/legato bench --size full --compare

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache

# Migrations and storage tests on PostgreSQL 15, the oldest server Legato supports
# (Debian's postgresql-15 package; override with PG15_BIN=/path/to/bin).
PG15_BIN ?= /usr/lib/postgresql/15/bin
STORAGE_TESTS := tests/migration tests/integration/test_partitions.py \
	tests/integration/test_jsonb_funnel.py tests/integration/test_cli_db.py
.PHONY: test-pg15
test-pg15: $(STAMP)
	@if [ -x $(PG15_BIN)/postgres ]; then \
		LEGATO_TEST_PG_BIN=$(PG15_BIN) $(BIN)/pytest -q $(STORAGE_TESTS); \
	else \
		echo "SKIPPED the PostgreSQL 15 run: no server in $(PG15_BIN) (install postgresql-15 or set PG15_BIN)"; \
	fi
test: test-pg15
