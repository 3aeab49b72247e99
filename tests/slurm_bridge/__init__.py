"""The Slurm bridge (slurm_bridge/), with captured, simulated and real Slurm."""
