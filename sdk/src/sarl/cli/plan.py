"""``sarl plan FILE``: the resource plan of an Experiment or a Study, before anything runs.

Wired by :mod:`sarl.cli.main`. Prints the plan as a table (:mod:`sarl.plan.render`) or, with
``--json``, as JSON; exits 1 when the plan does not fit (so a script or CI can gate a
submission on it), 2 when the document is invalid. ``--store-capacity`` is the object store's
room for checkpoints (a quantity such as ``4Ti``); the platform chart tells the operator the
bundled store's size, which ``sarl plan`` cannot know.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from sarl.cli.options import SetOpt, fail
from sarl.cli.run import DocumentArg


def plan_command(
    document: DocumentArg,
    sets: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    store_capacity: Annotated[
        str | None,
        typer.Option(
            help="Room in the object store for checkpoints, e.g. 20Gi (the platform chart's "
            "bundled store) or 8Ti; unknown if not given.",
            metavar="QUANTITY",
        ),
    ] = None,
    train_rows: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Rows of the training dataset, for the steps and GPU-hours estimate.",
            metavar="N",
        ),
    ] = None,
    terms: Annotated[
        bool, typer.Option("--terms", help="A Study: show every arm's per-GPU memory terms.")
    ] = False,
) -> None:
    """Print the resource plan: GPU memory per phase, disks, store, GPUs and GPU-hours.

    Exits 1 when it does not fit, naming each field to change and the numbers."""
    from sarl.plan import plan_experiment, plan_study
    from sarl.plan.render import as_json as plan_json
    from sarl.plan.render import experiment_text, study_text
    from sarl.plan.units import parse_quantity
    from sarl.spec.loader import SpecError, validate_document, validate_study
    from sarl.spec.overrides import load_with_sets
    from sarl.spec.study import is_study_document

    try:
        capacity = None if store_capacity is None else parse_quantity(store_capacity)
    except ValueError as e:
        raise fail(f"--store-capacity: {e}") from e
    try:
        data, label = load_with_sets(document, sets)
        if is_study_document(data):
            study = validate_study(data, label)
            plan = plan_study(
                study, train_rows=train_rows, store_capacity=capacity, read_local=True
            )
            text = study_text(plan, terms=terms)
        else:
            exp = validate_document(data, label)
            plan = plan_experiment(  # type: ignore[assignment]
                exp, train_rows=train_rows, store_capacity=capacity, read_local=True
            )
            text = experiment_text(plan)  # type: ignore[arg-type]
    except (SpecError, ValueError) as e:  # ValueError: a figure the plan cannot compute
        raise fail(str(e)) from e
    typer.echo(json.dumps(plan_json(plan), indent=2) if as_json else text)
    if plan.misfits:
        raise typer.Exit(code=1)
