"""Layer 2, the system: what this machine is (GPUs, topology, links, NCCL's paths and logs, provenance)."""
