"""The transformer planner: what Megatron-LM runs (16-bit, recomputation, sequence parallelism, interleaved
pipelines, several NICs), priced in closed form so thousands of plans are searched per second."""
