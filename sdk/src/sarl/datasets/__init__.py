"""Training and benchmark datasets in verl's parquet layout (``sarl data prepare``).

Readers per public source (:mod:`~sarl.datasets.sources`), the papers' OpenRubrics filters
(:mod:`~sarl.datasets.filters`), the verl row schema shared with the cluster jobs
(:mod:`~sarl.datasets.schema`) and atomic local/S3 parquet I/O (:mod:`~sarl.datasets.uris`).
Called by ``sarl.cli.data``, ``sarl_jobs.data`` and the evaluation job. Importing this package
is free: pyarrow, minio and transformers are imported by the functions that need them.
"""

from sarl.datasets.prepare import PrepareReport, output_uri, prepare
from sarl.datasets.schema import MATH_PROMPT_TEMPLATE, check_row, verl_row
from sarl.datasets.sources import SOURCES, Source, get_source
from sarl.datasets.tables import DatasetError

__all__ = [
    "MATH_PROMPT_TEMPLATE",
    "SOURCES",
    "DatasetError",
    "PrepareReport",
    "Source",
    "check_row",
    "get_source",
    "output_uri",
    "prepare",
    "verl_row",
]
