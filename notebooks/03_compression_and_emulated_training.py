# %% [md]
# # flexcomm 3: compressors, flexible switching and emulated training
#
# One implementation of each compressor runs both in the in-process emulation (N logical workers,
# exact arithmetic) and in the real DDP hooks. Here: what each compressor sends and how much of the
# gradient survives (the compression gain), then a short emulated training where time comes from
# the cost model of a real cluster.

# %%
import torch

from compression import LocalCommunicator, make_compressor
from experiments.emulated import EmulationConfig, run_emulation

# %% [md]
# ## Payload and gain of each compressor on 4 workers' random gradients

# %%
torch.manual_seed(0)
grads = [torch.randn(100_000) for _ in range(4)]
comm = LocalCommunicator(4)
for name in ["dense", "topk-ag", "topk-ar", "topk-ar-sketch", "randomk", "threshold", "fp16"]:
    compressor = make_compressor(name, ratio=0.01) if name not in ("dense", "fp16") else make_compressor(name)
    stats = compressor.exchange(grads, comm).stats
    print(f"{name:15s} bytes/rank {stats.payload_bytes:>9,d}  gain {stats.gain:.3f}")

# %% [md]
# ## Emulated data-parallel training on the paper's 8 x V100 testbed

# %%
config = EmulationConfig(workload="mlp-digits", workers=8, cluster="8x1-v100-40g", ratio=0.01, steps=60,
                         eval_every=20, seed=0)
results = run_emulation(config, ["dense", "topk-ag", "flexible"], plot=False)
{k: (round(v.summary["final_test_acc"], 3), round(v.summary["sim_time_s"], 4)) for k, v in results.items()}
