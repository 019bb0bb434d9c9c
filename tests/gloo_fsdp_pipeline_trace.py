"""Two gloo ranks on loopback, profiled as torch.profiler profiles training: each step gathers a parameter shard
(FSDP's all_gather), reduce-scatters the gradient (FSDP) and passes an activation from stage 0 to stage 1
(pipeline send/recv). Writes rank0.json and rank1.json to the folder named; tests/test_gpu_trace.py reads them."""

import os
import sys

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule


def main(rank: int, world: int, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    shard = torch.ones(4096)

    def export(prof: profile) -> None:
        prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
                 record_shapes=True, on_trace_ready=export) as prof:
        for _ in range(3):
            full = torch.empty(4096 * world)
            dist.all_gather_into_tensor(full, shard)  # FSDP: gather the parameters
            grad = torch.empty(4096)
            dist.reduce_scatter_tensor(grad, full)  # FSDP: reduce-scatter the gradients
            act = torch.ones(1024)
            if rank == 0:  # pipeline: stage 0 -> stage 1
                dist.send(act, 1)
            else:
                dist.recv(act, 0)
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    mp.spawn(main, args=(2, sys.argv[1], int(sys.argv[2])), nprocs=2)
