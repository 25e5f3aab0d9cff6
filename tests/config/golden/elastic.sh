# torchrun command for node 0 of 1:4, from elastic.yaml
torchrun --nproc-per-node=gpu --nnodes=1:4 --rdzv-backend=c10d --rdzv-endpoint=head-node:29400 --rdzv-id=exp42 --max-restarts=0 train.py
