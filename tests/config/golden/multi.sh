# torchrun command for node 1 of 2, from multi.yaml
# max_restarts: a c10d rendezvous at node 0's address, not the static one, which a restart
# does not survive (c10d ranks the nodes in the order they join)
ACCELERATE_MIXED_PRECISION=bf16 DISTRUN_MIXED_PRECISION=bf16 NCCL_DEBUG=WARN torchrun --nproc-per-node=4 --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29511 --rdzv-id=distrun-29511 --max-restarts=1 train.py --epochs 3 --name 'run one'
