"""Cluster tests: a local plane with real nodes (``make test-cluster``, as root).

Every test here is marked ``cluster``. They need root and the packages ``make cluster-deps``
installs, so they are collected only when the ``-m`` expression names ``cluster``
(``make test-cluster``); ``make test`` and a bare ``pytest`` leave them out.
"""

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markexpr = config.getoption("markexpr", "") or ""
    selected = "cluster" in markexpr and "not cluster" not in markexpr
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        if "tests/cluster" in str(item.path):
            item.add_marker(pytest.mark.cluster)
            (keep if selected else drop).append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
