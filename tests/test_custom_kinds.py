"""Kinds a conftest registers through ``pytest_robustexplain_register_perturbations`` belong to that
session's run: they are gated like the built-ins, serial and under xdist, named in the marker and the
option, recorded in the report — and gone for the next session in the same process (pytester runs them
inline), where the name is an unknown kind again."""

from __future__ import annotations

import json

import pytest

from pytest_robustexplain.perturbations import available_kinds

pytest_plugins = ["pytester"]

CONFTEST = '''
import dataclasses


def drop_oldest(history, severity, catalog, rng):
    n = max(1, round(0.1 * severity * len(history.interactions)))
    return dataclasses.replace(history, interactions=history.interactions[n:]), {"dropped_oldest": n}


def pytest_robustexplain_register_perturbations(register):
    register("drop_oldest", drop_oldest, aliases=("drop",))
'''

TEST = '''
import pytest


@pytest.mark.robustness(perturbations=["drop", "noise"], min_combined=0.3, min_metric=0.1)
def test_gate(robustness):
    assert robustness.verdict.outcome == "PASS"


def test_unmarked(perturbed_histories):
    assert {p.kind for p in perturbed_histories} == {"drop_oldest"}
    assert all(p.changes["dropped_oldest"] >= 1 for p in perturbed_histories)
'''


def test_a_registered_kind_is_gated_and_stays_in_its_session(pytester: pytest.Pytester,
                                                              xdist_args: tuple[str, ...]) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_kinds=TEST)
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-users=6",
                                "--robustexplain-perturbations=drop_oldest", "--robustexplain-json=r.json",
                                "-p", "no:cacheprovider", *xdist_args)
    result.assert_outcomes(passed=4)  # drop_oldest, noise_injection, overall, and the unmarked test
    report = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert {p["key"]["kind"] for p in report["pairs"]} >= {"drop_oldest", "noise_injection"}
    assert "drop_oldest" not in available_kinds()  # the process's registry never saw it

    # The next session in this process, without the conftest: the kind is unknown there.
    (pytester.path / "conftest.py").unlink()
    again = pytester.runpytest("--robustexplain-backend=template", "-p", "no:cacheprovider")
    assert again.ret != 0
    again.stdout.fnmatch_lines(["*unknown perturbation kind 'drop'*"])


def test_a_clashing_registration_is_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('''
def pytest_robustexplain_register_perturbations(register):
    register("noise", lambda history, severity, catalog, rng: (history, {}))
''')
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest_robustexplain_register_perturbations: perturbation name 'noise' is "
                                 "already registered (by noise_injection)*"])
