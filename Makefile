# durable-agents: `make help` lists the targets. Start with `make demo` and `make test`.
#
# Three virtualenvs, each created on first use and re-created only when its inputs change:
#   .venv      the project + dev tools (pip install -e '.[dev]'), re-installed when pyproject.toml changes
#   .venv-sam  AWS SAM CLI (pins its own boto3, so it cannot share .venv)
#   .venv-cfn  cfn-lint 1.53.3 (the last release that runs the SAM translator; see below)
#   .venv-policy  checkov + cfn-lint-serverless (which needs cfn-lint >= 1.57) for `make lint-policy`
#   .venv-bench   the peers `make bench` compares with (AWS durable functions local runner, DBOS)
#                 and matplotlib: never in .venv, never in the layer

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

PYTHON ?= python3
SAM_CLI_VERSION ?= 1.170.0
CFN_LINT_VERSION ?= 1.53.3
# make lint-policy: checkov's IAM checks, run on the SAM-translated template (scripts/policy_lint.py).
CHECKOV_VERSION ?= 3.3.30
CFN_LINT_SERVERLESS_VERSION ?= 0.3.6
POLICY_CFN_LINT_VERSION ?= 1.58.0
SAM_TRANSLATOR_VERSION ?= 1.115.0
POLICY_PINS := checkov==$(CHECKOV_VERSION) cfn-lint-serverless==$(CFN_LINT_SERVERLESS_VERSION) \
               cfn-lint==$(POLICY_CFN_LINT_VERSION) aws-sam-translator==$(SAM_TRANSLATOR_VERSION)

VENV := .venv
VENV_SAM := .venv-sam
VENV_CFN := .venv-cfn
VENV_POLICY := .venv-policy
VENV_BENCH := .venv-bench
# The same pins as pyproject.toml's `bench` extra (keep the two in step).
BENCH_PINS := aws-durable-execution-sdk-python==3.0.0 aws-durable-execution-sdk-python-testing==1.4.0 \
              dbos==3.4.0 matplotlib==3.11.2
VENV_STAMP := $(VENV)/.installed
SAM_STAMP := $(VENV_SAM)/.installed-$(SAM_CLI_VERSION)
CFN_STAMP := $(VENV_CFN)/.installed-$(CFN_LINT_VERSION)
POLICY_STAMP := $(VENV_POLICY)/.installed-$(CHECKOV_VERSION)-$(CFN_LINT_SERVERLESS_VERSION)-$(POLICY_CFN_LINT_VERSION)-$(SAM_TRANSLATOR_VERSION)
BENCH_STAMP := $(VENV_BENCH)/.installed-$(shell echo '$(BENCH_PINS)' | cksum | cut -d' ' -f1)

SAM := $(VENV_SAM)/bin/sam
CFN_LINT := $(VENV_CFN)/bin/cfn-lint
export SAM_CLI_TELEMETRY := 0

# Only the directories that exist (a fresh clone has no empty ones).
PY_DIRS := $(wildcard layers local functions tests scripts)

# pip on some machines warns about every package for unreadable extra index locations; drop
# that noise, keep everything else (and pip's exit status, thanks to pipefail).
PIP_QUIET := { grep -v "is ignored: it is neither a file nor a directory" || true; }
# A first install takes minutes: show one line per package pip collects, then what it
# installed (and any error), instead of minutes of silence; the rest of pip's output is noise.
PIP_PROGRESS := awk '/^(Collecting|Installing collected|Successfully installed)|ERROR|error:/ { print "    " $$0; fflush() }'

# `make deploy ENV=prod` / `make build ENV=dev` select a samconfig.toml section.
ENV ?=
SAM_CONFIG_ENV := $(if $(ENV),--config-env $(ENV))

# `sam build` without a container needs a python3.13 on PATH. Where python3.13 is not on PATH
# but pyenv has a 3.13 installed (as on the dev/CI machines), put it beside the current one.
PYENV_313 = $(shell python3.13 --version >/dev/null 2>&1 || pyenv versions --bare 2>/dev/null | grep -E '^3\.13(\.[0-9]+)?$$' | tail -n 1)
BUILD_ENV = $(if $(PYENV_313),PYENV_VERSION=$(shell pyenv version-name 2>/dev/null):$(PYENV_313))

.PHONY: help venv venv-sam venv-cfn venv-policy venv-bench lint typecheck validate lint-policy pytest test reliability \
        reliability-fast openapi docs screenshots demo bench bench-local bench-concurrency bench-loop local \
        build build-check deploy scaffold dist clean distclean sam-image sam-local

help: ## Show this help
	@echo "durable-agents. First: 'make demo' (local run, no AWS) and 'make test'."
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# ------------------------------------------------------------------------------ virtualenvs
venv: $(VENV_STAMP) ## Create .venv with the project and dev tools (Python >= 3.11)

$(VENV_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "error: durable-agents needs Python >= 3.11, but '$(PYTHON)' is" \
	       "$$($(PYTHON) --version 2>/dev/null || echo 'not found')." >&2; \
	  echo "       Install Python 3.11+ and run: make PYTHON=/path/to/python3.11 ..." >&2; \
	  exit 1; }
	@echo "==> creating $(VENV) with $$($(PYTHON) --version) and installing '.[dev]'"
	@echo "    (first time only: pip downloads and installs about 70 packages, a minute or two)"
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/python -m pip install --progress-bar off -e '.[dev]' 2>&1 | $(PIP_PROGRESS)
	@touch $@

venv-sam: $(SAM_STAMP) ## Create .venv-sam with aws-sam-cli

$(SAM_STAMP):
	@echo "==> creating $(VENV_SAM) with aws-sam-cli==$(SAM_CLI_VERSION)"
	@test -x $(VENV_SAM)/bin/python || $(PYTHON) -m venv $(VENV_SAM)
	@$(VENV_SAM)/bin/python -m pip install --quiet 'aws-sam-cli==$(SAM_CLI_VERSION)' 2>&1 | $(PIP_QUIET)
	@rm -f $(VENV_SAM)/.installed-*
	@touch $@

venv-cfn: $(CFN_STAMP) ## Create .venv-cfn with cfn-lint 1.53.3

$(CFN_STAMP):
	@echo "==> creating $(VENV_CFN) with cfn-lint==$(CFN_LINT_VERSION)"
	@test -x $(VENV_CFN)/bin/python || $(PYTHON) -m venv $(VENV_CFN)
	@$(VENV_CFN)/bin/python -m pip install --quiet 'cfn-lint==$(CFN_LINT_VERSION)' 2>&1 | $(PIP_QUIET)
	@rm -f $(VENV_CFN)/.installed-*
	@touch $@

venv-policy: $(POLICY_STAMP) ## Create .venv-policy with checkov and cfn-lint-serverless

$(POLICY_STAMP):
	@echo "==> creating $(VENV_POLICY) with $(POLICY_PINS)"
	@test -x $(VENV_POLICY)/bin/python || $(PYTHON) -m venv $(VENV_POLICY)
	@$(VENV_POLICY)/bin/python -m pip install --quiet $(POLICY_PINS) 2>&1 | $(PIP_QUIET)
	@rm -f $(VENV_POLICY)/.installed-*
	@touch $@

venv-bench: $(BENCH_STAMP) ## Create .venv-bench with the benchmark peers and matplotlib

$(BENCH_STAMP):
	@echo "==> creating $(VENV_BENCH) with $(BENCH_PINS)"
	@test -x $(VENV_BENCH)/bin/python || $(PYTHON) -m venv $(VENV_BENCH)
	@$(VENV_BENCH)/bin/python -m pip install --quiet $(BENCH_PINS) 2>&1 | $(PIP_QUIET)
	@rm -f $(VENV_BENCH)/.installed-*
	@touch $@

# ----------------------------------------------------------------------------------- checks
lint: $(VENV_STAMP) ## ruff check + ruff format --check + the layer contracts (.importlinter)
	$(VENV)/bin/ruff check $(PY_DIRS)
	$(VENV)/bin/ruff format --check $(PY_DIRS)
	PYTHONPATH=functions $(VENV)/bin/lint-imports --no-cache

# mypy's config (pyproject.toml) checks the durable_agents package; the handlers under
# functions/ have no __init__.py per function, so they are checked as namespace packages
# rooted at functions/ (step_runner.app, api.app, ...), the way Lambda imports them.
typecheck: $(VENV_STAMP) ## mypy --strict on durable_agents and functions/
	$(VENV)/bin/mypy
	@if [ -n "$$(find functions -name '*.py' 2>/dev/null | head -n 1)" ]; then \
	  echo "$(VENV)/bin/mypy --explicit-package-bases functions"; \
	  $(VENV)/bin/mypy --explicit-package-bases functions; \
	fi

# `sam validate` checks offline but refuses to start without a region; the template names no
# region, so any region gives the same answer. cfn-lint 1.53.3 runs the SAM translator too and
# catches errors in AWS::Serverless::* resources that cfn-lint >= 1.54 misses.
validate: $(SAM_STAMP) $(CFN_STAMP) ## sam validate --lint + cfn-lint 1.53.3 on template.yaml
	$(SAM) validate --lint --region us-east-1 2>&1 | { grep -v "not available in Feature Toggle Config" || true; }
	$(CFN_LINT) template.yaml

# Least privilege and serverless practice (docs/security.md, "Accepted policy-lint findings"):
# checkov on the SAM-translated template, where each function's Policies become an IAM role
# its IAM checks can see (plus a planted wildcard it must catch), then cfn-lint-serverless.
# Accepted findings are skipped per resource in template.yaml, each with its reason.
lint-policy: $(POLICY_STAMP) ## checkov (IAM least privilege) + cfn-lint-serverless on template.yaml
	$(VENV_POLICY)/bin/python scripts/policy_lint.py template.yaml
	$(VENV_POLICY)/bin/cfn-lint --append-rules cfn_lint_serverless.rules -- template.yaml

# pytest-xdist runs the suite on PYTEST_WORKERS processes (auto: one per core; 0: in this
# process, as plain pytest). --dist loadfile keeps each test file on one worker, so a module's
# fixtures (a moto server, the fake services) start once and its tests never race each other.
PYTEST_WORKERS ?= auto
pytest: $(VENV_STAMP) ## Run the test suite (on every core: PYTEST_WORKERS=auto)
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile

test: lint typecheck validate lint-policy pytest ## lint + typecheck + validate + lint-policy + pytest (what CI runs)

# The fault suite (docs/reliability.md). `make pytest` already runs its fast subset (a few
# hundred schedules, every boundary case, the boto3 fault cases); `make reliability` runs it
# with RELIABILITY_EXAMPLES schedules per property test (>= 10,000 in all) plus the soak, and
# prints the count of schedules and faults per fault class.
RELIABILITY_EXAMPLES ?= 800
reliability: $(VENV_STAMP) ## The full fault suite: >= 10,000 schedules + the SIGKILL soak
	RELIABILITY_EXAMPLES=$(RELIABILITY_EXAMPLES) RELIABILITY_FULL=1 \
	  $(VENV)/bin/python -m pytest tests/reliability tests/contract/test_sharded_scale.py \
	  -m "reliability" -p no:cacheprovider -rxX

reliability-fast: $(VENV_STAMP) ## The fault suite's fast subset (what `make pytest` runs of it)
	$(VENV)/bin/python -m pytest tests/reliability -m "reliability and not reliability_full" -rxX

# docs/openapi.json is what GET /openapi.json serves; tests/unit/test_api_openapi.py fails when
# the copy is stale.
openapi: $(VENV_STAMP) ## Regenerate docs/openapi.json (the Api's OpenAPI document)
	$(VENV)/bin/python scripts/openapi.py

# The console's and the approval page's screenshots in docs/, from the browser tests' own
# Chromium runs (local mode; needs chromium + chromium-driver).
screenshots: $(VENV_STAMP) ## Refresh docs/console-*.png and docs/approval-page.png (headless Chromium)
	CONSOLE_SCREENSHOTS=docs APPROVAL_PAGE_SCREENSHOT=docs/approval-page.png \
	  $(VENV)/bin/python -m pytest tests/browser -p no:cacheprovider -q

# The API reference, generated from the docstrings by pdoc (scripts/api_docs.py), then every
# internal link in it, in docs/ and in README.md is checked. `make pytest` builds it too (into
# a temporary directory, tests/unit/test_docs_links.py), so `make test` fails on a broken link.
docs: $(VENV_STAMP) ## Build the API reference into build/docs/ (pdoc) and check the docs' links
	$(VENV)/bin/python scripts/api_docs.py build/docs

# ---------------------------------------------------------------------------------- running
demo: $(VENV_STAMP) ## Run the local demo (moto, no AWS account, no Docker)
	$(VENV)/bin/python scripts/demo.py

bench: $(VENV_STAMP) ## Benchmarks: AWS requests and cost per operation kind, peers side by side (~15 min)
	@$(MAKE) venv-bench || echo "==> no $(VENV_BENCH): the peers are skipped"
	$(VENV)/bin/python scripts/bench.py
	$(VENV)/bin/python scripts/bench_accounting.py
	$(VENV)/bin/python scripts/bench_shards.py
	$(VENV)/bin/python scripts/bench_peers.py --plot docs/benchmarks-peers.png
	$(VENV)/bin/python scripts/bench_instructions.py
	$(VENV)/bin/python scripts/bench_replay.py
	$(VENV)/bin/python scripts/bench_invocations.py
	$(VENV)/bin/python scripts/bench_warm_load.py
	$(VENV)/bin/python scripts/bench_cold_start.py

bench-local: $(VENV_STAMP) ## The moto store's runs/minute, ephemeral vs durable (~10 min)
	$(VENV)/bin/python scripts/bench_local.py

bench-concurrency: $(VENV_STAMP) ## The moto store: runs/minute and step latency p50/p95/p99 at 1, 10, 50 runs at once
	$(VENV)/bin/python scripts/bench_local.py --concurrency 1,10,50 --rounds 2

bench-loop: $(VENV_STAMP) ## The local loop vs issue 33's goals: one run, 50 at once, a 1,000-run store, a restart (~3 min)
	$(VENV)/bin/python scripts/bench_loop.py --markdown docs/benchmarks.md

.PHONY: bench-flow
bench-flow: $(VENV_STAMP) ## Flow control: a 10,000-run queue over 1,000 keys, rate limits from threads (~3 min)
	$(VENV)/bin/python scripts/bench_flow.py

local: $(VENV_STAMP) ## Serve the runtime locally on http://127.0.0.1:3000
	$(VENV)/bin/durable-agents local

# ------------------------------------------------------------------------------- sam local
# The template's functions in Lambda containers (ADR 0028): Docker's engine (installed and
# started where run as root), an image built from Debian's packages and the package index.
sam-image: $(VENV_STAMP) ## Docker's engine up and the Lambda-compatible python3.13 image built (cached)
	$(VENV)/bin/python scripts/sam_image.py

# SAM_LOCAL_ARGS=--short: one invoke per function (what `make test` runs); --aws-images: SAM
# pulls AWS's own images (a registry needed) instead of the built one.
SAM_LOCAL_ARGS ?=
sam-local: $(VENV_STAMP) $(SAM_STAMP) ## Every function in a Lambda container against moto, then a whole run through start-api/start-lambda
	$(VENV)/bin/python scripts/sam_local.py $(SAM_LOCAL_ARGS)

# --------------------------------------------------------------------------------------- AWS
build: $(SAM_STAMP) ## sam build (python3.13/arm64, no container; ENV=dev|prod optional)
	$(BUILD_ENV) $(SAM) build $(SAM_CONFIG_ENV)

# The layer holds the runtime only and each function only what it imports (docs/deploy.md,
# "What is deployed"): `make pytest` checks that on the same file trees built without SAM; this
# checks a real `sam build`, then prints the sizes.
build-check: build $(VENV_STAMP) ## sam build, then check and measure what it built (layer, functions)
	PACKAGING_BUILD_DIR=.aws-sam/build $(VENV)/bin/python -m pytest -q -p no:cacheprovider \
	  tests/template/test_packaging.py
	$(VENV)/bin/python scripts/package_sizes.py .aws-sam/build

deploy: build ## sam build && sam deploy --guided (ENV=dev|prod optional)
	$(SAM) deploy --guided $(SAM_CONFIG_ENV)

# ------------------------------------------------------------------------------ distribution
# `durable-agents init DIR` writes a new app from the package's scaffold; its generic files
# (template.yaml, the handlers, the layer's build files) are copied from this repository here,
# so the distribution ships them (ADR 0025).
scaffold: $(VENV_STAMP) ## Copy template.yaml, the handlers and the layer build into the init scaffold
	$(VENV)/bin/python scripts/scaffold.py

# The wheel and the sdist of durable-agents (the runtime; its [local] extra: local mode, the
# CLI, `init`), built by `python -m build` in .venv: offline, no build isolation.
dist: scaffold ## Build dist/durable_agents-*.whl and .tar.gz (pip install 'durable-agents[local]' from it)
	rm -rf dist build/lib build/bdist.*
	$(VENV)/bin/python -m build --no-isolation --outdir dist . > dist.log 2>&1 || { cat dist.log >&2; exit 1; }
	@rm -f dist.log
	@ls -l dist

# ------------------------------------------------------------------------------------ clean
clean: ## Remove build output and tool caches (keeps the virtualenvs)
	rm -rf .aws-sam .pytest_cache .mypy_cache .ruff_cache .durable-agents dist build/lib build/bdist.* \
	  local/durable_agents_local/scaffold/generated
	find . \( -path ./.git -o -path './.venv*' \) -prune -o \
	  \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +

distclean: clean ## clean, and remove the virtualenvs too
	rm -rf $(VENV) $(VENV_SAM) $(VENV_CFN) $(VENV_POLICY)
