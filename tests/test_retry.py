"""Backoff policy: capped exponential with jitter, and the settings-driven default."""

from __future__ import annotations

import random

import pytest

from django_pgjobs.retry import ExponentialBackoff, default_backoff


@pytest.fixture
def seeded_random():
    """Deterministic jitter for this test; the global random state is restored afterwards."""
    state = random.getstate()
    random.seed(20240601)
    yield
    random.setstate(state)


def test_without_jitter_the_delay_is_base_to_the_attempt_capped():
    policy = ExponentialBackoff(base=2, cap=300, jitter=0)
    assert [policy(n) for n in range(10)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]
    assert policy(50, RuntimeError()) == 300


def test_bounds():
    policy = ExponentialBackoff(base=2, cap=300, jitter=0.2)
    assert policy.bounds(0) == (0.8, 1.2)
    assert policy.bounds(3) == (8 * 0.8, 8 * 1.2)
    assert policy.bounds(8) == (256 * 0.8, 300)  # the upper bound never exceeds the cap
    assert policy.bounds(20) == (300 * 0.8, 300)
    assert policy.bounds(-5) == policy.bounds(0)


def test_huge_attempt_numbers_hit_the_cap_instead_of_overflowing():
    policy = ExponentialBackoff(base=10, cap=60, jitter=0)
    assert policy(100_000) == 60
    assert policy.bounds(100_000) == (60, 60)


@pytest.mark.usefixtures("seeded_random")
@pytest.mark.parametrize("attempt", [0, 1, 4, 8, 9, 30])
def test_jitter_stays_within_bounds_and_spreads(attempt):
    policy = ExponentialBackoff(base=2, cap=300, jitter=0.25)
    low, high = policy.bounds(attempt)
    delays = [policy(attempt) for _ in range(500)]
    assert all(low <= d <= high for d in delays)
    assert all(d <= 300 for d in delays)
    # Failures that happened together do not retry in lock-step.
    assert len(set(delays)) > 100
    raw = min(300, 2**attempt)
    if raw < 300:
        assert min(delays) < raw < max(delays)


def test_zero_cap_means_retry_at_once():
    policy = ExponentialBackoff(base=1, cap=0, jitter=0.5)
    assert {policy(n) for n in range(5)} == {0}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"base": 0.5}, "base must be >= 1"),
        ({"cap": -1}, "cap must be >= 0"),
        ({"jitter": 1}, r"jitter must be in \[0, 1\)"),
        ({"jitter": -0.1}, r"jitter must be in \[0, 1\)"),
    ],
)
def test_bad_parameters_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        ExponentialBackoff(**options)


def test_default_policy_comes_from_settings(settings):
    assert default_backoff() == ExponentialBackoff(2.0, 300.0, 0.2)
    settings.PGJOBS = {"BACKOFF_BASE": 5.0, "BACKOFF_CAP_SECONDS": 30.0, "BACKOFF_JITTER": 0.0}
    assert default_backoff() == ExponentialBackoff(5.0, 30.0, 0.0)
    assert default_backoff()(2) == 25
