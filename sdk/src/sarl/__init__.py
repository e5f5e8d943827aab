"""sarl: structure-aware reinforcement learning for reasoning models.

The package holds the reward core (pure scoring functions, no torch/Kubernetes/trainer imports),
embedding clients, thin framework adapters under ``sarl.integrations``, and the ``sarl`` CLI.
From Python: ``sarl.Client`` (local and cluster runs), ``sarl.Experiment`` (the spec),
``sarl.SpecError`` (a bad spec, one line naming the field), ``sarl.ExperimentInfo`` and
``sarl.ExperimentNotFound`` (what the cluster client returns and raises), ``sarl.compare`` (runs
side by side), and for scoring traces offline ``sarl.create_reward`` (a registered reward by
name), ``sarl.parse_sample`` (a decoded JSON object as a sample) and ``sarl.reasoning_maps``
(their maps, inline in Jupyter). The example notebooks use nothing else. Each is defined once, in
the module named below; nothing heavy is imported here so ``import sarl`` stays fast.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy exports below are, for type checkers
    from sarl.client import Client
    from sarl.cluster.errors import ExperimentNotFound
    from sarl.cluster.models import ExperimentInfo
    from sarl.rewards.registry import create_reward
    from sarl.rewards.samples import parse_sample
    from sarl.spec.experiment import Experiment
    from sarl.spec.loader import SpecError
    from sarl.tracking.compare import compare
    from sarl.viz.map_gallery import reasoning_maps

__version__ = "0.1.0"
__all__ = [
    "Client",
    "Experiment",
    "ExperimentInfo",
    "ExperimentNotFound",
    "SpecError",
    "__version__",
    "compare",
    "create_reward",
    "parse_sample",
    "reasoning_maps",
]


def __getattr__(name: str) -> Any:
    # Lazy exports: `import sarl` must not import pydantic models or clients eagerly.
    if name == "Client":
        from sarl.client import Client

        return Client
    if name == "Experiment":
        from sarl.spec.experiment import Experiment

        return Experiment
    if name == "SpecError":
        # What validate/run/submit raise for a bad spec: one line naming the field.
        from sarl.spec.loader import SpecError

        return SpecError
    if name == "ExperimentInfo":
        # What Client().get/wait/list return: name, phase, status of an Experiment on a cluster.
        from sarl.cluster.models import ExperimentInfo

        return ExperimentInfo
    if name == "ExperimentNotFound":
        from sarl.cluster.errors import ExperimentNotFound

        return ExperimentNotFound
    if name == "compare":
        # sarl.compare(run_a, run_b, ...): a Comparison (tables, to_frame(), figure()).
        from sarl.tracking.compare import compare

        return compare
    if name == "create_reward":
        # sarl.create_reward("structure", {...}): a reward by name; `with` closes it.
        from sarl.rewards.registry import create_reward

        return create_reward
    if name == "parse_sample":
        from sarl.rewards.samples import parse_sample

        return parse_sample
    if name == "reasoning_maps":
        from sarl.viz.map_gallery import reasoning_maps

        return reasoning_maps
    raise AttributeError(f"module 'sarl' has no attribute {name!r}")
