"""Hangs: a barrier inside `if rank == 0:` (rank 0 waits for the others, which have gone
on to the all_reduce after it)."""
import gc

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} starts", flush=True)
    if rank == 0:
        dist.barrier()  # only rank 0 enters it
    total = torch.ones(4)
    dist.all_reduce(total)
    print(f"rank {rank} total {total.tolist()}", flush=True)
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
