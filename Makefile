# Every target bootstraps .venv by itself (idempotent): a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The node packages: what a broker or a controller runs (mypy strict, ruff format).
NODE_PACKAGES := protocol server storage raft controller coordinator broker fetcher

.PHONY: venv kcat test lint unit integration clients client-suites spark scenarios demo bench bench-smoke chaos secure compose-test fuzz clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check $(NODE_PACKAGES) kit lab cli spark_jobs tests
	$(BIN)/ruff format --check $(NODE_PACKAGES)
	$(BIN)/mypy

# tests/clients drive real Kafka clients; kcat is Debian's package, installed here when it is missing.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat (apt-get install kcat)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kcat >/dev/null; \
	} || { echo "kcat is missing and could not be installed: apt-get install kcat"; exit 1; }

# KafkaJS (npm) for docs/examples/js and tests/clients/test_your_application.py; installed when missing.
kafkajs: client-deps
	@[ -d docs/examples/js/node_modules/kafkajs ] || { \
	  command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js (apt-get install nodejs npm)"; exit 1; }; \
	  echo "installing KafkaJS (npm install in docs/examples/js)"; \
	  cd docs/examples/js && npm install --no-audit --no-fund --silent; \
	}
clients: kafkajs
.PHONY: kafkajs

# --durations: the slowest tests, so a CI log shows where make test's time goes.
# Three test processes (pytest-xdist), a file's tests in one of them (its module fixtures, clusters
# included, are made once): most of the suite waits on real processes, so three share two cores well.
test: lint kcat
	$(BIN)/pytest -q -n 3 --dist loadfile --durations=25

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

integration: $(STAMP) kcat
	$(BIN)/pytest -q tests/integration tests/clients

# The long real-client runs, kept out of `make test` for its time: group members across a coordinator's
# failure, librdkafka across a leader's, a secure cluster from client.properties, every codec through
# librdkafka, a chaos run driven by librdkafka, and the idempotence stories (30 % of answers lost across
# failovers and restarts), protocol-level fault rules, transactions, retention, and a clean librdkafka run's report.
clients: $(STAMP) kcat client-deps
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=15 -m clients tests/clients tests/integration/test_idempotence.py tests/spark/test_clean_run.py

# The Go (Sarama, Debian) and JavaScript (KafkaJS, npm) clients of tests/clients, installed and built when
# missing, outside the clone (scripts/client_suites/setup_clients.sh).
client-deps:
	scripts/client_suites/setup_clients.sh >/dev/null

# The clients' own test suites against a `cluster up` cluster, with allowlists and report cards
# (isrsim-suite-cards/; docs/clients.md): librdkafka's test-runner (built once from node-rdkafka's npm
# tarball into ~/.cache/isrsim) in full mode and with -P, kafka-python's integration tests (its PyPI
# sdist), and librdkafka's allowlist under `isrsim chaos --workload none` followed by the report.
client-suites: $(STAMP)
	scripts/client_suites/librdkafka_build.sh >/dev/null
	$(BIN)/pytest -q -s -m clients tests/suites

# The scenarios under the buggy truncation modes (KIP-101 under high-watermark, KIP-279 under
# leader-epoch-pre-kip-279), the network-fault ones and zombie-leader: each brings up its own cluster,
# so they are kept out of `make test`.
scenarios: $(STAMP)
	$(BIN)/pytest -q -m scenarios tests/spark/test_scenarios.py

demo: $(STAMP)
	$(BIN)/isrsim demo

bench: $(STAMP)
	$(BIN)/isrsim bench

# Every bench scenario in its smallest form (`isrsim bench --smoke`): the quick ones also run in `make test`,
# failover, catch-up, fetch sessions and the report job (a Spark session) only here.
bench-smoke: $(STAMP)
	$(BIN)/pytest -q -m bench tests/bench/test_bench_smoke.py

# The short chaos run (24 s, one fault of each kind), then five minutes of every fault kind, each against a
# 3-broker cluster and followed by the report (tests/integration/test_chaos.py).
chaos: $(STAMP)
	$(BIN)/pytest -q -s -m chaos tests/integration/test_chaos.py

# The long Kafka-protocol fuzz run (docs/fuzzing.md): mutated and extreme requests to 3 brokers that forward
# admin requests to 3 controllers, for at most ISRSIM_FUZZ_SECONDS (780) or ISRSIM_FUZZ_INPUTS (1000000).
fuzz: $(STAMP)
	$(BIN)/pytest -q -s -m fuzz tests/fuzz/test_fuzz.py

# The managed-cluster tests again on SASL_SSL (`cluster up --secure`), then the demo on a secure cluster.
secure: $(STAMP)
	$(BIN)/pytest -q -m secure tests/integration/test_cluster.py
	$(BIN)/isrsim demo --secure --data-dir isrsim-demo-secure

# The compose files on a real engine (docs/docker.md): installs Debian's docker.io and Compose v2 when
# missing, starts dockerd (and stops it after), makes the base image with debootstrap, builds the images,
# then runs the plain and the secure cluster through (tests/integration/test_compose_engine.py). Root.
compose-test: $(STAMP)
	BIN=$(BIN) docker/compose-test.sh

clean:
	rm -rf $(VENV) isrsim-data .pytest_cache .mypy_cache .ruff_cache
