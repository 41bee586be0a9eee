"""A deterministic, seeded simulation of a whole disq cluster (design.md sections 1 and 4).

Each simulated node is the production :class:`~disq.core.node_core.NodeCore` (beanstalk core,
Disque core, SWIM membership) driven as the server runtime drives it: inputs, then
``ready`` / ``apply_ready`` / ``advance``. ``python -m disq.testing.sim --seed N --trace``
replays a seed byte for byte.

Layout: ``config`` (SimConfig, the sweep's per-seed configs, the replay line), ``model``
(records, result, node state), ``world`` (the state every part shares: clock and event heap,
nodes, records), ``step`` (the node step), and the parts, each a class owning its own state
that ``Simulation`` builds and wires: ``network`` (and the views that stand in for SWIM:
static, oracle), ``nemesis``, ``workload`` (Disque clients, idempotency keys),
``beanstalk_load`` (beanstalk clients through the bridge), ``schedules``, ``invariants`` (the
checks; their text is the spec); ``simulation`` (Simulation, run_seed), ``cli``.
"""

from disq.testing.sim.cli import main
from disq.testing.sim.config import T0_MS, SimConfig, config_diff, replay_command, sweep_config
from disq.testing.sim.model import AddRec, BeanRec, Delivery, InvariantViolation, SimResult
from disq.testing.sim.simulation import Simulation, run_seed

__all__ = [
    "T0_MS",
    "AddRec",
    "BeanRec",
    "Delivery",
    "InvariantViolation",
    "SimConfig",
    "SimResult",
    "Simulation",
    "config_diff",
    "main",
    "replay_command",
    "run_seed",
    "sweep_config",
]
