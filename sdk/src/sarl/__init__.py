"""sarl: structure-aware reinforcement learning for reasoning models.

The package holds the reward core (pure scoring functions, no torch/Kubernetes/trainer imports),
embedding clients, thin framework adapters under ``sarl.integrations``, and the ``sarl`` CLI.
From Python: ``sarl.Client`` (local and cluster runs), ``sarl.Experiment`` (the spec) and
``sarl.compare`` (runs side by side). Nothing heavy is imported here so ``import sarl`` stays
fast.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy exports below are, for type checkers
    from sarl.client import Client
    from sarl.spec.experiment import Experiment
    from sarl.tracking.compare import compare

__version__ = "0.1.0"
__all__ = ["Client", "Experiment", "__version__", "compare"]


def __getattr__(name: str) -> Any:
    # Lazy exports: `import sarl` must not import pydantic models or clients eagerly.
    if name == "Client":
        from sarl.client import Client

        return Client
    if name == "Experiment":
        from sarl.spec.experiment import Experiment

        return Experiment
    if name == "compare":
        # sarl.compare(run_a, run_b, ...): a Comparison (tables, to_frame(), figure()).
        from sarl.tracking.compare import compare

        return compare
    raise AttributeError(f"module 'sarl' has no attribute {name!r}")
