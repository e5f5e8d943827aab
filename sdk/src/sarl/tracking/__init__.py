"""Experiment tracking on MLflow and run comparison.

``metrics`` names what a run logs (free to import), ``tracker`` logs one run per experiment for
the local runner, ``compare`` reads runs back for ``sarl compare``, ``history`` reads a run's
metric curves (for ``compare`` and the Study report). Nothing here imports MLflow at import
time; MLflow comes with the ``sarl[local]`` extra.
"""
