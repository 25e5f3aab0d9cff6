# torchrun command for node 1 of 2, from multi.yaml
ACCELERATE_MIXED_PRECISION=bf16 DISTRUN_MIXED_PRECISION=bf16 NCCL_DEBUG=WARN torchrun --nproc-per-node=4 --nnodes=2 --node-rank=1 --master-addr=10.0.0.1 --master-port=29511 --max-restarts=1 train.py --epochs 3 --name 'run one'
