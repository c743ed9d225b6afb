"""The simulator: a virtual clock, the ``SimExecutor`` (the cost model's step time), and a driver
that feeds a workload to one or more engines built from a plan."""

from tokenmill.sim.clock import EventClock
from tokenmill.sim.executor import SimExecutor
from tokenmill.sim.runner import SimOptions, SimulationResult, scheduler_config_for, simulate

__all__ = ["EventClock", "SimExecutor", "SimOptions", "SimulationResult", "scheduler_config_for", "simulate"]
