"""Fixtures the Spark tests share (the session itself is tests/conftest.py's `spark`)."""

from __future__ import annotations

import pytest


@pytest.fixture
def few_shuffle_partitions(spark):  # noqa: ANN001, ANN201
    """Stateful queries plan one state store per shuffle partition: 2 instead of klog's 8 here."""
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    yield
    from klog.spark.session import SHUFFLE_PARTITIONS

    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
