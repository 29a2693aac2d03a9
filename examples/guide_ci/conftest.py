"""The guide's example calls the model itself (``generate_explanation``), outside the plugin's marker, so it
takes its model as ``robustexplain run`` does — from the environment (``ROBUSTEXPLAIN_MODEL``,
``ROBUSTEXPLAIN_HOST``), ``robustexplain.yaml`` or pytest's ini file — not from pytest's ``--robustexplain-*``
flags. Without one it is skipped, saying how to run it."""

from pathlib import Path

import pytest

from robustexplain import explanation_model

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    mine = [item for item in items if item.path.parent == HERE]
    if mine and explanation_model() is None:
        skip = pytest.mark.skip(reason="the guide's example calls the model itself: set ROBUSTEXPLAIN_MODEL "
                                       "(and ROBUSTEXPLAIN_HOST), or ROBUSTEXPLAIN_BACKEND=template")
        for item in mine:
            item.add_marker(skip)
