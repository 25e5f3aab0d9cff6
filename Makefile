# distrun: set-up, demo, tests and docs. `make test`, `make demo` and `make docs` work on a fresh
# clone with only Python.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.distrun-installed

.PHONY: test test-loaded demo lint typecheck docs bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt 'torch==2.13.0'
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	# DeepSpeed compiles its shared-memory op on its first run (about a minute): once, here.
	# A lock left by a build that was killed makes every later build wait for ever (seen): one
	# older than 10 minutes is stale (`distrun doctor` fails on it too) and goes first.
	find "$${TORCH_EXTENSIONS_DIR:-$$HOME/.cache/torch_extensions}" -name lock -mmin +10 \
		-delete 2>/dev/null || true
	$(PY) -c "from deepspeed.accelerator import get_accelerator as a; \
		a().create_op_builder('ShareMemCommBuilder').load()" >/dev/null
	touch $(STAMP)

# Two pytest-xdist workers (one per core of the 2-core machines the suite is sized for):
# most of an end-to-end test is waiting (a rendezvous, a timeout, a process starting), and
# two tests overlap their waits; `worksteal` hands a worker left idle the other's queued
# tests (the long end-to-end ones no longer end the run on one worker). WORKERS=0 runs the
# suite in one process. The 25 slowest tests are listed at the end.
WORKERS ?= 2
TEST_OPTS = -q --durations=25 $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist worksteal)

test: $(STAMP)
	$(PY) -m pytest $(TEST_OPTS)

# The same suite with every core kept busy by a loop (ended with the run, even on Ctrl-C):
# no test may depend on an idle machine.
test-loaded: $(STAMP)
	$(PY) tests/under_load.py -- $(PY) -m pytest $(TEST_OPTS)

demo: $(STAMP)
	rm -f examples/mnist_like_ddp.py
	$(VENV)/bin/distrun convert examples/mnist_like.py
	$(VENV)/bin/distrun launch --nproc-per-node 2 examples/mnist_like_ddp.py --epochs 3 \
		--save-model $(VENV)/mnist_like_demo.pt

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The manual (docs/, mkdocs.yml) as a site in site/; a broken link or anchor fails the build.
# NO_MKDOCS_2_WARNING: mkdocs-material's notice about its own future, not about these pages.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) benchmarks/bench_convert.py
	$(PY) benchmarks/bench_startup.py
	$(PY) benchmarks/bench_launch.py
	$(PY) benchmarks/bench_sweep.py
	$(PY) benchmarks/bench_check.py
	$(PY) benchmarks/bench_tutorial.py
	$(PY) benchmarks/bench_batch_sampler.py

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache
