"""The practitioner's guide's CI example, as the guide writes it: plain asserts, no marker.

Every user of the evaluation fixture (10 users, 3 recommended items each) is explained once; then each of the
five perturbations is applied to the user's history at severity 3 and the item explained again; the four
metrics compare the two explanations. The gate is the paper's: the mean of the four metric means at least
0.50, each metric's mean at least 0.35.

The model and host come from the environment, as every setting can (``ROBUSTEXPLAIN_MODEL``,
``ROBUSTEXPLAIN_HOST``; or ``robustexplain.yaml``, pytest's ini file): run it from the project's root with

    ROBUSTEXPLAIN_MODEL=llama3.1:8b pytest examples/guide_ci

It makes 180 model calls, one at a time, with no confidence interval and no controls: the plugin's
``@pytest.mark.robustness`` gate (see ``examples/test_explanations.py``) is the same measurement with
intervals, early stopping, the cross-user controls and reports.
"""

from statistics import mean

from robustexplain import (
    apply_perturbation,
    compute_keyword_stability,
    compute_length_stability,
    compute_semantic_sim,
    compute_structural_consistency,
    generate_explanation,
    load_test_fixture,
)

PERTURBATION_TYPES = ["noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift",
                      "missing_values"]
SEVERITY = 3
MIN_COMBINED = 0.50
MIN_METRIC = 0.35


def test_explanation_robustness():
    scores = {"semantic": [], "keyword": [], "structural": [], "length": []}
    for user, item in load_test_fixture("fixtures/robustness_eval.json"):
        original = generate_explanation(user.history, item)
        for ptype in PERTURBATION_TYPES:
            perturbed = apply_perturbation(user.history, ptype, SEVERITY)
            perturbed_explanation = generate_explanation(perturbed, item)
            scores["semantic"].append(compute_semantic_sim(original, perturbed_explanation))
            scores["keyword"].append(compute_keyword_stability(original, perturbed_explanation))
            scores["structural"].append(compute_structural_consistency(original, perturbed_explanation))
            scores["length"].append(compute_length_stability(original, perturbed_explanation))

    means = {metric: mean(values) for metric, values in scores.items()}
    combined = mean(means.values())
    shown = ", ".join(f"{metric} {value:.3f}" for metric, value in means.items())
    assert combined >= MIN_COMBINED, f"combined robustness {combined:.3f} < {MIN_COMBINED} ({shown})"
    for metric, value in means.items():
        assert value >= MIN_METRIC, f"{metric} stability {value:.3f} < {MIN_METRIC} ({shown})"
