# Two entry points for a fresh machine: `make demo` and `make test`. Everything else is a helper.
VENV := .venv
PY := $(VENV)/bin/python
# Resolved once per make run: $DATABASE_URL, else the local PostgreSQL, else a pgserver one (see the script).
DB_URL = $(shell $(PY) scripts/database_url.py)

DEMO_PROJECTS ?= 400
DEMO_OBJECTS_PER_PROJECT ?= 50

.PHONY: demo test migrate bench

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

migrate: $(VENV)/.installed
	DATABASE_URL="$(DB_URL)" $(PY) manage.py migrate --noinput

demo: $(VENV)/.installed
	@export DATABASE_URL="$(DB_URL)" && \
	$(PY) manage.py migrate --noinput -v 0 && \
	$(PY) manage.py seed_demo_data --reset --projects $(DEMO_PROJECTS) --objects-per-project $(DEMO_OBJECTS_PER_PROJECT) && \
	$(PY) manage.py purge_delisted --dry-run && \
	$(PY) manage.py purge_delisted

test: $(VENV)/.installed
	scripts/install_test_tools.sh
	DATABASE_URL="$(DB_URL)" $(PY) -m pytest $(PYTEST_ARGS)
