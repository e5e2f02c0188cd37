# The course's entry points. A newcomer on a fresh machine needs two commands:
#   make demo     set up if needed, then a real vLLM server, a bundled workload, a report and a plot
#   make test     set up if needed, then the unit, integration, chapter and lab tests (scripts/test)
# PROFILE=<name> (e.g. PROFILE=h200) picks the hardware profile; make passes it through the
# environment to every command. COURSE_SKIP_SETUP=1 uses an already provisioned Python
# (`python3` on PATH, e.g. the H200 machine or an activated conda env) instead of .venv.

SHELL := /bin/bash
.DEFAULT_GOAL := help

ifeq ($(COURSE_SKIP_SETUP),1)
PY := python3
SRC := PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH}
COURSE := $(SRC) $(PY) -m vllm_course
else
PY := .venv/bin/python
SRC :=
COURSE := .venv/bin/vllm-course
endif
export PY

.PHONY: help setup demo test test-unit notebook lab doctor clean release autograde feedback

help:
	@echo "make setup      create .venv with the course and its vLLM backend (idempotent)"
	@echo "make demo       set up, then run the demo on the detected profile (PROFILE=... to choose)"
	@echo "make test       set up, then run every test suite (scripts/test)"
	@echo "make test-unit  unit tests only (about 2 minutes on 2 cores)"
	@echo "make notebook NB=03_kv_cache  one chapter notebook as CI runs it, with its time"
	@echo "make lab LAB=lab01  one lab autograded as CI does it (solution, release, forgery)"
	@echo "make doctor     versions, hardware, profile and checks"
	@echo "make clean      remove results/ and caches (keeps .venv)"
	@echo "make release    labs: generate the learner versions in labs/release/ (nbgrader)"
	@echo "make autograde  labs: grade every submission in labs/submitted/ (one at a time)"
	@echo "make feedback   labs: HTML feedback per learner in labs/feedback/"

setup:
	bash scripts/setup.sh

demo: setup
	$(COURSE) demo

test: setup
	scripts/test

test-unit: setup
	$(SRC) $(PY) -m pytest tests/unit -q

notebook: setup
	@if [ -z "$(NB)" ]; then echo "notebook: say which, e.g. make notebook NB=03_kv_cache"; exit 2; fi
	scripts/test notebooks -k "$(NB)"

lab: setup
	@if [ -z "$(LAB)" ]; then echo "lab: say which, e.g. make lab LAB=lab01"; exit 2; fi
	scripts/test labs -k "$(LAB)"

doctor:
	@if [ "$(COURSE_SKIP_SETUP)" != 1 ] && [ ! -x .venv/bin/vllm-course ]; then \
	  echo "doctor: .venv/bin/vllm-course not found: run make setup"; exit 1; fi
	$(COURSE) doctor

clean:
	rm -rf results/ .pytest_cache/ .ruff_cache/ .cache/
	find . -path ./.venv -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
	find . -path ./.venv -prune -o -type d -name .ipynb_checkpoints -prune -exec rm -rf {} +

# Graded labs (labs/README.md). nbgrader runs from labs/, where its config is; it calls the
# `alembic` script of its own environment, so that environment's bin/ goes first on PATH.
LABS := $(notdir $(wildcard labs/source/lab*))
ifeq ($(COURSE_SKIP_SETUP),1)
NBGRADER := cd labs && PYTHONPATH=$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH} python3 -m nbgrader
else
NBGRADER := cd labs && PATH=$(CURDIR)/.venv/bin:$$PATH $(CURDIR)/.venv/bin/python -m nbgrader
endif

release: setup
	@for lab in $(LABS); do \
	  ($(NBGRADER) generate_assignment $$lab --force --log-level=WARN) || exit 1; \
	done
	$(SRC) $(PY) -m pytest tests/unit/test_labs_release.py -q
	@echo "release: labs/release/ regenerated and checked (fresh, no solution or hidden test leaked); commit it"

# nbgrader's gradebook (labs/gradebook.db) is not committed: generate_assignment registers each
# lab in it before autograde can grade that lab.
autograde: setup
	@for lab in $(LABS); do \
	  if ls labs/submitted/*/$$lab/*.ipynb >/dev/null 2>&1; then \
	    ($(NBGRADER) generate_assignment $$lab --force --log-level=WARN) || exit 1; \
	    ($(NBGRADER) autograde $$lab --force) || exit 1; \
	  fi; \
	done

feedback: setup
	@for lab in $(LABS); do \
	  if ls labs/autograded/*/$$lab/*.ipynb >/dev/null 2>&1; then \
	    ($(NBGRADER) generate_feedback $$lab --force) || exit 1; \
	  fi; \
	done
