#!/usr/bin/env bash
# The `gpu` tests on a lent CUDA machine whose image has PyTorch but not distrun's other
# needs: those travel as wheels in .whl/ (libcst, and DeepSpeed with the packages it needs
# that the image lacks; see CONTRIBUTING.md, "GPUs"), installed into /tmp/site. distrun
# itself runs from this checkout. Everything it prints is also kept in $OUT (the device
# tool brings that folder back), or in /tmp/gpu-out elsewhere.
#
#   bash tests/gpu/device.sh            # the gpu tests, doctor --bandwidth, the probe below
#   bash tests/gpu/device.sh -k quiet   # only the tests pytest's -k selects, nothing else
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
if [ "$#" -gt 0 ]; then
    timeout "${GPU_TESTS_TIMEOUT:-330}" python3 -m pytest -m gpu tests/gpu -n 4 \
        -p no:cacheprovider -q -rA "$@" 2>&1 | tee "$OUT/pytest.txt" | tail -60
    exit "${PIPESTATUS[0]}"
fi
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch, libcst; print("torch", torch.__version__, "cuda",
torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
    python3 -c 'import deepspeed; print("deepspeed", deepspeed.__version__)' 2>&1 | tail -1
} 2>&1 | tee "$OUT/versions.txt"

# Which of PyTorch's Flight Recorder dumps holds NCCL's entries in this build (the hang
# report reads the first that holds any: distrun/check/boot.py)
MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 RANK=0 WORLD_SIZE=1 TORCH_FR_BUFFER_SIZE=100 \
timeout 60 python3 - <<'PY' 2>&1 | tee "$OUT/flight_recorder.txt"
import pickle, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(0)
t = torch.ones(4, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
c10d = torch._C._distributed_c10d
for name in ("_dump_nccl_trace", "_dump_fr_trace"):
    dump = getattr(c10d, name, None)
    entries = None if dump is None else pickle.loads(dump()).get("entries")
    print(name, "absent" if dump is None else f"{len(entries or [])} entries")
dist.destroy_process_group()
PY

timeout 60 python3 -m distrun doctor --bandwidth 2>&1 | tail -30 | tee "$OUT/doctor.txt"

timeout "${GPU_TESTS_TIMEOUT:-330}" python3 -m pytest -m gpu tests/gpu -n 4 -p no:cacheprovider \
    -q -rA --durations=0 2>&1 | tee "$OUT/pytest.txt" | tail -60
