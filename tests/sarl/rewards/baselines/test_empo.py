"""EMPO: each response scores its answer cluster's frequency; semantic entropy and its gates.

The reference cases were computed by running the authors' math reward,
``get_empo_math_reward(G)`` of ``trl/src/open_r1/rewards.py`` in github.com/QingyangZhang/EMPO at
commit c5eccd400ba7a7a1685dedf25eab03780aad855f (with its ``semantic_uncertainty.py`` and
math-verify), on completions ``"so \\boxed{<answer>}"`` (``None``: a completion without a box);
only their inputs and outputs are copied here: the rewards, and ``H`` from its
``cluster_assignment_entropy`` of the semantic ids it formed.
"""

from __future__ import annotations

import math

import pytest

from sarl.rewards.base import Sample
from sarl.rewards.baselines.empo import EMPOReward, semantic_clusters
from sarl.rewards.math_answer import answers_equal
from sarl.rewards.registry import RewardConfigError, create_reward, get_reward_class

#: This module's behaviour before the reference became the default.
OURS = {
    "extraction": "boxed_only",
    "clustering": "values",
    "gate_arithmetic": "exact",
    "unanswered": "excluded",
    "entropy_max_fraction_of_log_g": None,
}


def boxed(*answers: str | None) -> list[Sample]:
    return [Sample("no answer" if a is None else f"so \\boxed{{{a}}}") for a in answers]


def test_registered_as_a_group_reward() -> None:
    assert get_reward_class("empo") is EMPOReward and EMPOReward.needs_group


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"entropy_min": 1.0, "entropy_max": 0.5}, "entropy_min"),
        ({"entropy_max": 0}, "entropy_max"),
        ({"entropy_max_fraction_of_log_g": 0}, "entropy_max_fraction_of_log_g"),
        ({"entropy_max_fraction_of_log_g": 1.5}, "entropy_max_fraction_of_log_g"),
        ({"unanswered": "dropped"}, "unanswered"),
        ({"extraction": "last_number"}, "extraction"),
        ({"clustering": "embeddings"}, "clustering"),
        ({"gate_arithmetic": "decimal"}, "gate_arithmetic"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
    ],
)
def test_bad_settings_name_the_field(settings: dict[str, object], field: str) -> None:
    with pytest.raises(RewardConfigError, match=field):
        create_reward("empo", settings)


# (answers, the reference's rewards, the reference's H)
REFERENCE_CASES: list[tuple[list[str | None], list[float], float]] = [
    (["3", "3", "5", None], [0.5, 0.5, 0.25, 0.0], 1.0397207708399179),
    (["1", "1", None, None], [0.5, 0.5, 0.0, 0.0], 1.0397207708399179),
    (["1", "1", None], [2 / 3, 2 / 3, 0.0], 0.6365141682948128),
    (["4", None, "4", "4"], [0.75, 0.0, 0.75, 0.75], 0.5623351446188083),
    (
        ["2", None, "2", "5", None, "5", "5", "9"],
        [0.25, 0.0, 0.25, 0.375, 0.0, 0.375, 0.375, 0.125],
        1.4941751382893085,
    ),
    (["7", "7", "7", "7"], [1.0] * 4, 0.0),
    # ties between clusters: every member of a tied cluster gets the same frequency
    (["1", "1", "2", "2"], [0.5] * 4, 0.6931471805599453),
    (["1", "1", "2", "2", "3", "3"], [1 / 3] * 6, 1.0986122886681096),
    (["1", "1", "2", "2", "3", "3", "4"], [2 / 7] * 6 + [1 / 7], 1.351783994289646),
    # H = log G (every response its own cluster, unanswered ones included): gated
    (["1", "2", "3", "4"], [0.0] * 4, 1.3862943611198906),
    (["1", "2", "3", "4", "5"], [0.0] * 5, 1.6094379124341005),
    ([str(i) for i in range(1, 9)], [0.0] * 8, 2.0794415416798357),
    (["1", "2", "3", None], [0.0] * 4, 1.3862943611198906),
    (["1", "2", None, "3", "4", "5", None, "6"], [0.0] * 8, 2.0794415416798357),
    (["1", None, None, None, None, None, None, None], [0.0] * 8, 2.0794415416798357),
    ([None, None, None, None], [0.0] * 4, 1.3862943611198906),
    (["1"], [0.0], 0.0),  # G = 1: H = 0 = log 1
]


@pytest.mark.parametrize(("answers", "rewards", "entropy"), REFERENCE_CASES)
def test_default_matches_the_reference(
    answers: list[str | None], rewards: list[float], entropy: float
) -> None:
    out = create_reward("empo").score_groups([boxed(*answers)])[0]
    assert [o.score for o in out] == pytest.approx(rewards, rel=1e-12, abs=0)
    assert [o.components["semantic_entropy"] for o in out] == pytest.approx(
        [entropy] * len(out), rel=1e-12
    )
    gated = entropy >= math.log(len(answers)) - 1e-12
    assert {o.components["gated"] for o in out} == {float(gated)}
    if gated and any(a is not None for a in answers):
        assert any(o.components["cluster_frequency"] > 0 for o in out)  # zeroed by the gate


@pytest.mark.parametrize(
    ("answers", "reference_rewards"),
    [
        ([str(i) for i in range(1, 8)], [1 / 7] * 7),
        (["1", "2", "3", "4", "5", "6", None], [1 / 7] * 6 + [0.0]),
        (["1", "2", "3"], [1 / 3] * 3),
    ],
)
def test_all_distinct_is_gated_where_the_reference_misses_by_rounding(
    answers: list[str | None], reference_rewards: list[float]
) -> None:
    """At G = 3 and G = 7 (its math config) the reference's H for all-distinct answers is one ulp
    below log G (1.0986122886681096 and 1.945910149055313), so its ``H < log G`` keeps the group,
    and so does the default; ``gate_arithmetic: exact`` gives the gate it means (as at G = 4, 5,
    8 above)."""
    default = create_reward("empo").score_groups([boxed(*answers)])[0]
    assert [o.score for o in default] == reference_rewards
    assert {o.components["gated"] for o in default} == {0.0}
    out = create_reward("empo", {"gate_arithmetic": "exact"}).score_groups([boxed(*answers)])[0]
    assert any(r > 0 for r in reference_rewards)
    assert [o.score for o in out] == [0.0] * len(answers)
    assert {o.components["gated"] for o in out} == {1.0}
    assert out[0].components["semantic_entropy"] == pytest.approx(math.log(len(answers)))


def test_unanswered_singletons_count_as_clusters() -> None:
    result = semantic_clusters(["3", "3", "5", None, None])
    assert result.num_clusters == 4
    assert result.frequencies == (0.4, 0.4, 0.2, 0.0, 0.0)
    assert result.entropy == pytest.approx(-0.4 * math.log(0.4) - 3 * 0.2 * math.log(0.2))


@pytest.mark.parametrize(
    ("answers", "frequencies", "entropy", "clusters"),
    [
        # hand computed: clusters {3, 3}, {5}; G = 4 counts the unanswered response
        (
            ["3", "3", "5", None],
            [0.5, 0.5, 0.25, 0.0],
            -0.5 * math.log(0.5) - 0.25 * math.log(0.25),
            2,
        ),
        (["1", "2", "3", "4"], [0.25] * 4, math.log(4), 4),  # all different: maximal entropy
        (["0.5", "1/2", "\\frac{1}{2}"], [1.0] * 3, 0.0, 1),  # one meaning: certain
        ([None, None], [0.0, 0.0], 0.0, 0),  # no answers: no cluster
        (["1", None, None, None, None, None, None, None], [0.125] + [0.0] * 7, math.log(8) / 8, 1),
        ([], [], 0.0, 0),
    ],
)
def test_excluded_unanswered_without_the_log_g_gate(
    answers: list[str | None], frequencies: list[float], entropy: float, clusters: int
) -> None:
    """``unanswered: excluded`` and no log G gate: H over the answer clusters, never gated."""
    result = semantic_clusters(answers, answers_equal, "excluded", "exact")
    assert list(result.frequencies) == pytest.approx(frequencies)
    assert result.entropy == pytest.approx(entropy)
    assert result.num_clusters == clusters
    if answers:
        out = create_reward("empo", OURS).score_groups([boxed(*answers)])[0]
        assert [o.score for o in out] == pytest.approx(frequencies)
        assert [o.components["semantic_entropy"] for o in out] == pytest.approx(
            [entropy] * len(out)
        )
        assert {o.components["gated"] for o in out} == {0.0}


def test_excluded_unanswered_keeps_the_log_g_gate_when_set() -> None:
    """With unanswered responses left out of H, missing answers lower H below log G."""
    reward = create_reward("empo", {"unanswered": "excluded"})
    distinct, with_missing = reward.score_groups([boxed("1", "2", "3", "4"), boxed("1", "2", None)])
    assert [o.score for o in distinct] == [0.0] * 4
    assert [o.score for o in with_missing] == pytest.approx([1 / 3, 1 / 3, 0.0])


def test_empty_group_scores_nothing() -> None:
    out = create_reward("empo").score_groups([[], boxed("1")])
    assert [len(g) for g in out] == [0, 1]


@pytest.mark.parametrize(
    ("settings", "answers", "gated"),
    [
        ({"entropy_min": 0.1}, ["2", "2", "2"], True),  # unanimous: H = 0 <= min
        ({"entropy_min": 0.1}, ["2", "2", "3"], False),
        ({"entropy_max": 1.0}, ["1", "2", "3", "4"], True),  # H = ln 4 >= max
        ({"entropy_max": 1.0}, ["1", "1", "1", "2"], False),
        ({"entropy_min": 0.1, "entropy_max": 1.0}, ["1", "1", "2", "3"], True),  # H ~ 1.04
        # fraction of log G: 0.5 · ln 4 = ln 2 = H of two equal clusters
        ({"entropy_max_fraction_of_log_g": 0.5}, ["1", "1", "2", "2"], True),
        ({"entropy_max_fraction_of_log_g": 0.5}, ["1", "1", "1", "2"], False),  # H ~ 0.56
        ({"entropy_max_fraction_of_log_g": None}, ["1", "2", "3", "4"], False),
    ],
)
def test_entropy_gate_zeroes_whole_groups(
    settings: dict[str, float | None], answers: list[str], gated: bool
) -> None:
    out = create_reward("empo", settings).score_groups([boxed(*answers)])[0]
    assert {o.components["gated"] for o in out} == {float(gated)}
    if gated:
        assert all(o.score == 0.0 for o in out)
        assert any(o.components["cluster_frequency"] > 0 for o in out)
    else:
        assert [o.score for o in out] == [o.components["cluster_frequency"] for o in out]
