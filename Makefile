# Two entry points for a fresh machine: `make demo` and `make test`. Everything else is a helper.
VENV := .venv
PY := $(VENV)/bin/python
# Resolved once per make run: $DATABASE_URL, else the local PostgreSQL, else a pgserver one (see the script).
DB_URL = $(shell $(PY) scripts/database_url.py)

DEMO_PROJECTS ?= 400
DEMO_OBJECTS_PER_PROJECT ?= 50
# The demo's nightly limits, for its run and for `make admin` alike: 2 batches of 500 cards leave about 2,400 of the
# demo's ~3,400 overdue cards for later nights, so the admin page shows a last run and a backlog with its nights.
# The run's metrics go to the checkout's textfile (.demo/, ignored by git: the development default) that `make admin`
# and `manage.py purge_delisted --last-run` read back.
DEMO_ENV = DELISTED_RETENTION_BATCH_SIZE=500 DELISTED_RETENTION_MAX_BATCHES_PER_RUN=2

# `make bench` sizes (docs/benchmarks.md): property objects of the small and the large catalog, the cards of the short
# memory run and the large backlog (throughput, live traffic), the small throughput catalog and its backlog, runs per
# measurement, batch pauses and pause factors tried under live traffic (the first factor is the live-read target's),
# rounds per purge under live traffic, the peers' catalog, backlog and rounds, the admin pages' catalog and
# backlog, runs with tracing off and on, and the base commit whose job this checkout's is compared with in pairs
# (the last commit before issue #46) with the number of pairs; the report's path. Smaller and quicker, for development,
# with the report elsewhere than the committed one:
#   make bench BENCH_LARGE_CARDS=500000 BENCH_BACKLOGS="5000 50000" BENCH_ADMIN_CARDS=100000 BENCH_ADMIN_BACKLOG=20000 \
#     BENCH_PEER_CARDS=300000 BENCH_PEER_BACKLOG=60000 BENCH_REPORT=/tmp/bench/benchmarks.md
BENCH_SMALL_CARDS ?= 100000
BENCH_LARGE_CARDS ?= 10000000
BENCH_BACKLOGS ?= 20000 200000
BENCH_SMALL_THROUGHPUT_CARDS ?= 300000
BENCH_SMALL_THROUGHPUT_BACKLOG ?= 60000
BENCH_REPEATS ?= 3
BENCH_PAUSES_MS ?= 0
BENCH_PAUSE_FACTORS ?= 60
BENCH_LIVE_ROUNDS ?= 4
BENCH_PEER_CARDS ?= 2000000
BENCH_PEER_BACKLOG ?= 400000
BENCH_PEER_ROUNDS ?= 5
BENCH_ADMIN_CARDS ?= 1000000
BENCH_ADMIN_BACKLOG ?= 200000
BENCH_TRACING_ROUNDS ?= 4
BENCH_BASE_REF ?= 5166042
BENCH_BASE_PAIRS ?= 6
BENCH_REPORT ?= docs/benchmarks.md
# `make bench-tracing` alone: a catalog of its own, large enough for runs of a few seconds.
BENCH_TRACING_CARDS ?= 1000000
BENCH_TRACING_BACKLOG ?= 150000

# `make admin` serves the app here (loopback only).
ADMIN_ADDRESS ?= 127.0.0.1:8000

.PHONY: demo demo-stop test migrate bench bench-tracing admin screenshots trace-picture

# The runtime requirements and the development tools (requirements-dev.txt); production installs requirements.txt only.
$(VENV)/.installed: requirements.txt requirements-dev.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(VENV)/.bench-installed: requirements-bench.txt $(VENV)/.installed
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-bench.txt
	touch $@

migrate: $(VENV)/.installed
	DATABASE_URL="$(DB_URL)" $(PY) manage.py migrate --noinput

demo: $(VENV)/.installed
	@export DATABASE_URL="$(DB_URL)" $(DEMO_ENV) && \
	$(PY) manage.py migrate --noinput -v 0 && \
	$(PY) manage.py seed_demo_data --reset --projects $(DEMO_PROJECTS) --objects-per-project $(DEMO_OBJECTS_PER_PROJECT) && \
	$(PY) manage.py purge_delisted --dry-run && \
	$(PY) manage.py purge_delisted && \
	echo "To see the backlog as staff do: make admin (a staff user, and the admin on http://$(ADMIN_ADDRESS)/admin/)"

# Stops the embedded PostgreSQL (pgserver) that demo or test started when 127.0.0.1:5432 did not answer, and
# deletes its data directory .pgserver/; says so when there is none.
demo-stop: $(VENV)/.installed
	$(PY) scripts/database_url.py --stop

# The suite on three processes (pytest-xdist), each with a test database of its own; docs/development.md says what keeps
# a test safe there. Three keep both cores busy while the tests wait on their subprocesses and servers (2 workers
# left them idle a third of the time; 4 were no faster). PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 3

test: $(VENV)/.installed
	scripts/install_test_tools.sh
	DATABASE_URL="$(DB_URL)" $(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# A helper after `make demo`: on the demo catalog only (refused in one line on any other, and with
# APP_ENV=production), a staff user with a new random password, printed once; then the app on $(ADMIN_ADDRESS)
# until Ctrl-C.
admin: $(VENV)/.installed
	@export DATABASE_URL="$(DB_URL)" $(DEMO_ENV) && \
	$(PY) manage.py demo_admin --address $(ADMIN_ADDRESS) && \
	exec $(PY) manage.py runserver $(ADMIN_ADDRESS) --noreload

# docs/tracing.md's span tree of a real run, as the tests' OTLP receiver collected it, into docs/images/.
trace-picture: $(VENV)/.installed
	TRACE_PICTURE=docs/images/run-trace.txt DATABASE_URL="$(DB_URL)" $(PY) -m pytest -q \
		tests/tracing/test_run_trace.py -k test_a_run_is_one_trace_rooted_in_its_run

# The README's pictures of what staff see, taken by the browser tests into docs/images/.
screenshots: $(VENV)/.installed
	scripts/install_test_tools.sh
	mkdir -p docs/images
	SCREENSHOTS_DIR="$(CURDIR)/docs/images" DATABASE_URL="$(DB_URL)" $(PY) -m pytest tests/browser -q

bench: $(VENV)/.bench-installed
	$(PY) -m bench.run --database-url "$(DB_URL)" --small-cards $(BENCH_SMALL_CARDS) \
		--large-cards $(BENCH_LARGE_CARDS) --backlogs $(BENCH_BACKLOGS) \
		--small-throughput-cards $(BENCH_SMALL_THROUGHPUT_CARDS) \
		--small-throughput-backlog $(BENCH_SMALL_THROUGHPUT_BACKLOG) \
		--repeats $(BENCH_REPEATS) --pauses-ms $(BENCH_PAUSES_MS) --pause-factors $(BENCH_PAUSE_FACTORS) \
		--live-rounds $(BENCH_LIVE_ROUNDS) --peer-cards $(BENCH_PEER_CARDS) --peer-backlog $(BENCH_PEER_BACKLOG) \
		--peer-rounds $(BENCH_PEER_ROUNDS) --admin-cards $(BENCH_ADMIN_CARDS) --admin-backlog $(BENCH_ADMIN_BACKLOG) \
		--tracing-rounds $(BENCH_TRACING_ROUNDS) --base-ref $(BENCH_BASE_REF) --base-pairs $(BENCH_BASE_PAIRS) \
		--output "$(BENCH_REPORT)"

# Section 8 of `make bench` alone, on a catalog of its own: tracing on (exporting) against off. Prints the figures.
bench-tracing: $(VENV)/.bench-installed
	$(PY) -m bench.tracing --database-url "$(DB_URL)" --cards $(BENCH_TRACING_CARDS) \
		--backlog $(BENCH_TRACING_BACKLOG) --rounds $(BENCH_TRACING_ROUNDS)
