"""Trace replays (sim_adapter/): SWF, the simulator, replay paths, reports."""
