"""Fixtures: gateway processes with temporary state, boto3 clients, fresh buckets."""
from __future__ import annotations

import uuid

import pytest

pytest.importorskip("boto3")

from services.object.tests.gatewayproc import GatewayProcess  # noqa: E402


@pytest.fixture(scope="session")
def gateway():
    with GatewayProcess.running() as gw:
        yield gw


@pytest.fixture
def fresh_gateway():
    """A gateway of its own (for crash tests)."""
    with GatewayProcess.running() as gw:
        yield gw


@pytest.fixture
def s3(gateway):
    return gateway.client()


@pytest.fixture
def bucket(s3):
    name = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name
