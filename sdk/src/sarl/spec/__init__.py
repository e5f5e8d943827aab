"""The Experiment spec (``apiVersion: sarl.dev/v1alpha1``, ``kind: Experiment``): one typed
document for ``kubectl apply``, notebooks and local runs. ``experiment.py`` holds the models,
``presets.py`` the named presets, ``loader.py`` YAML/dict loading with one-line errors.
"""

from sarl.spec.experiment import Experiment, ExperimentSpec
from sarl.spec.loader import SpecError, load_experiment, load_study
from sarl.spec.study import Study

__all__ = ["Experiment", "ExperimentSpec", "SpecError", "Study", "load_experiment", "load_study"]
