"""The project's decider tests use the simulator's low-level core from ``legato.testing``."""

from legato.testing.decider_sim import T0, Sim

__all__ = ["T0", "Sim"]
