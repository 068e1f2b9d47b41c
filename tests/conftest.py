"""Shared fixtures: one embedded Ray instance per test session, shut down at the end."""

import pytest
import ray


@pytest.fixture(scope="session", autouse=True)
def _ray_shutdown():
    yield
    if ray.is_initialized():
        ray.shutdown()
