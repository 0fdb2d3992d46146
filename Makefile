# gb10.dspark: a newcomer needs two targets, `make demo` and `make test`.
# Both install what they need (apt packages, the virtualenv, collections, the stand-in image).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV   ?= $(CURDIR)/.venv
# The virtualenv's base interpreter: Debian's python3 (tools/deps/apt.sh), the Python the ranks run their modules
# with. It is an optimised build; an unoptimised python3 earlier in PATH (a pyenv build, say) costs Ansible's
# controller about 12 % more CPU for the same work, and the speed probe's loop (tools/test_report) 30 % more.
BASE_PYTHON ?= /usr/bin/python3
PY     := $(VENV)/bin/python
PAIRS  ?= 1
STAMPS := $(CURDIR)/.deps
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(VENV)/bin:$(PATH)
SIM    := PYTHONPATH=$(CURDIR)/sim $(PY) -m dspark_sim

.PHONY: help deps sim-image sim-up sim-down sim-status demo test test-unit test-vllm test-vllm-install test-integration test-molecule lint bench \
	ee ee-engine ee-engine-down

help:
	@echo "make demo   bring one simulated GB10 pair up and serve the stand-in engine on it"
	@echo "make test   unit and integration tests (installs what they need)"
	@echo "make sim-up PAIRS=N | sim-down | sim-status | sim-image | deps | test-unit | test-vllm | test-integration | test-molecule"
	@echo "make bench  speed and memory targets, measured on the simulator (BENCH_ARCHIVE_GIB=4)"
	@echo "make ee     the execution environment gb10-dspark-ee:latest on the control node's engine (ee-engine | ee-engine-down)"

# ---- dependencies -----------------------------------------------------------------------
deps: $(STAMPS)/venv $(STAMPS)/collections $(STAMPS)/cli
	@bash tools/deps/apt.sh

$(STAMPS)/apt: tools/deps/apt.sh
	@mkdir -p $(STAMPS) && bash tools/deps/apt.sh && touch $@

$(STAMPS)/venv: requirements.txt meta/ee-requirements.txt $(STAMPS)/apt
	@test -x $(PY) || $(BASE_PYTHON) -m venv $(VENV)
	@echo "[deps] venv: installing requirements.txt into $(VENV)"
	@$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $@

# The `dspark` command line (cli/), installed editable into the virtualenv.
$(STAMPS)/cli: cli/pyproject.toml $(STAMPS)/venv
	@echo "[deps] cli: installing the dspark command line"
	@$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e ./cli
	@touch $@

$(STAMPS)/collections: requirements.yml tools/deps/install_collections.py $(STAMPS)/venv
	@$(PY) tools/deps/install_collections.py
	@touch $@

# ---- simulator --------------------------------------------------------------------------
sim-image: deps
	@$(SIM) image

sim-up: deps
	@$(SIM) up --pairs $(PAIRS)

sim-down:
	@if [ -x $(PY) ]; then $(SIM) down; else PYTHONPATH=$(CURDIR)/sim python3 -m dspark_sim down; fi

sim-status: deps
	@$(SIM) status

# ---- the execution environment (docs/operator-guide.md §6.1, tools/ee) ------------------------------------
# The control node's own dockerd (socket unix:///run/gb10-dspark-ee/docker.sock, data in /var/lib/gb10-dspark-ee),
# and the EE built on it with ansible-builder: skipped when an image with the same inputs' key exists.
ee-engine: deps
	@$(PY) -m tools.ee engine-up

ee-engine-down:
	@$(PY) -m tools.ee engine-down

ee: ee-engine
	@$(PY) -m tools.ee build

# ---- the two commands of the README -----------------------------------------------------
demo: sim-up
	@ansible-playbook -i inventories/sim playbooks/sim_smoke.yml
	@ansible-playbook -i inventories/sim playbooks/provision.yml --limit pair_sim01
	@echo
	@echo "Runtime gate of pair sim01 (artifacts/evidence/sim01/runtime-gate.json):"
	@$(PY) -c 'import json; d = json.load(open("artifacts/evidence/sim01/runtime-gate.json")); print("  status", d["status"], "errors", d["errors"]); e = d["evidence"]; print("  semantic", e["semantic"]["pass"], "tool_call", e["tool_call"]["pass"], "retrieval", e["retrieval"]["pass"])' 
	@$(SIM) status >/dev/null
	@echo
	@echo "The simulated pair serves the OpenAI API on its head:"
	@head=$$(ansible-inventory -i inventories/sim --host sim01-head | $(PY) -c 'import json,sys;print(json.load(sys.stdin)["ansible_host"])'); \
	  echo "  curl http://$$head:8888/v1/models"; \
	  echo "  curl http://$$head:8888/v1/completions -H 'Content-Type: application/json' -d '{\"model\":\"deepseek-v4-flash-dspark\",\"prompt\":\"Compute 7 multiplied by 19.\",\"max_tokens\":8}'"; \
	  echo "  .venv/bin/ansible -i inventories/sim all -m ansible.builtin.ping"; \
	  echo "  make sim-status | make sim-down"

# Phases: deps; the simulator tests' first and pair steps (tests/support/lanes.py: the pair step runs the two
# one-pair lanes and the second fleet's lane side by side; a failure there does not stop the run: the last step
# brings the simulator down, and the end reports the failure), with the unit tests beside them in two halves, and
# vLLM's virtualenv installed and lint run beside them on idle CPU and disk (SCHED_IDLE and the idle I/O class: they
# take little the lanes want; the unit tests are not idle, since their waits on threads and sockets would starve
# there); then the tail: the last step (the simulator's teardown, which mostly waits) and the real-vLLM lane (which
# needs no simulator) side by side, and molecule (one pair of its own simulator, waiting on its cold start much of
# the time) beside the lane as soon as the teardown has ended. Each one's time goes to
# artifacts/reports/TESTS.md (tools/test_report: standard library only, so the system python runs it before the
# virtualenv exists), with the 15 slowest simulator tests; `end` fails when a phase did.
TIMED := $(BASE_PYTHON) -m tools.test_report
test:
	@$(TIMED) begin
	@$(TIMED) run deps -- $(MAKE) --no-print-directory deps
	-@MAKE="$(MAKE)" $(TIMED) together integration-unit-install-and-lint \
	  "integration-first-and-pairs=test-integration STEPS=first,pairs" "unit-plugins=test-unit UNIT=tests/unit/plugins" \
	  "unit-others=test-unit UNIT='tests/unit --ignore=tests/unit/plugins'" \
	  --idle vllm-install=test-vllm-install lint=lint
	@MAKE="$(MAKE)" $(TIMED) together tail "integration-last=test-integration STEPS=last" vllm-lane=test-vllm \
	  "molecule@integration-last=test-molecule"
	@$(TIMED) end

lint: deps
	@$(VENV)/bin/ruff check plugins sim tools tests molecule cli
	@$(VENV)/bin/actionlint -config-file docs/ci/actionlint.yaml -shellcheck "$$(command -v shellcheck || true)" docs/ci/dspark-*.yml
	@VENV=$(VENV) bash tools/lint/ansible_lint.sh
	@$(PY) tools/sanity/run_sanity.py

UNIT ?= tests/unit
test-unit: deps
	@$(PY) -m pytest $(UNIT)

# The collection's clients against a real vLLM (CPU build, tiny model made here) and the stand-in compared with it
# (docs/vllm-lane.md). vLLM gets its own virtualenv in /var/cache/gb10-dspark-vllm, installed on first use only.
test-vllm: test-vllm-install
	@DSPARK_VLLM_REPORT=$(CURDIR)/artifacts/reports/VLLM.md $(PY) -m pytest --durations=0 tests/vllm

# vLLM's virtualenv alone (a no-op once installed): `make test` runs it beside the simulator tests' first and pair
# steps, on their moments of idle CPU, so that the tail runs only the vLLM lane's tests.
test-vllm-install: deps
	@$(PY) -m tools.vllm_lane.install

# In lanes (tests/support/lanes.py): the whole-fleet files alone, then the two pairs' tests side by side,
# then the whole-fleet files that end the run. `pytest tests/integration` runs them all in one process.
test-integration: deps
	@DSPARK_RELIABILITY_REPORT=$(CURDIR)/artifacts/reports/RELIABILITY.md $(PY) -m tests.support.lanes \
	  $(if $(STEPS),--steps $(STEPS))

test-molecule: deps
	@$(VENV)/bin/molecule test

# ---- benchmarks: speed and memory targets are measured here, never in timed tests ----------
bench: deps
	@$(SIM) up --pairs 1
	@$(PY) bench/image_load_memory.py
	@$(PY) bench/ratios.py
