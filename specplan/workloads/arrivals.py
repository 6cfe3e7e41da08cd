"""Arrival processes (pure numpy, seeded by the caller's generator).

Open loop: Poisson at a rate, or Gamma inter-arrivals with a coefficient of variation (CV > 1 is
bursty, CV < 1 smoother than Poisson, CV = 1 is Poisson); both return absolute arrival times
``t_i = X_1 + ... + X_i``. Closed loop and multi-turn sessions need think times: the delay between a
request completing and the next one being sent (constant, or exponential with the given mean). The simulator drives closed loops itself from the order and think times given to it.
"""

from __future__ import annotations

import numpy as np

from specplan.errors import ConfigError


def poisson_arrivals(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` arrival times of a Poisson process of ``rate`` requests per second."""
    if rate <= 0:
        raise ConfigError(f"workload.rate must be positive, got {rate}")
    return np.cumsum(rng.exponential(1.0 / rate, size=n))


def gamma_arrivals(n: int, rate: float, cv: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` arrival times with Gamma inter-arrivals of mean ``1/rate`` and coefficient of variation
    ``cv``: shape ``1/cv^2``, scale ``cv^2/rate``."""
    if rate <= 0 or cv <= 0:
        raise ConfigError(f"workload.rate and workload.cv must be positive, got rate {rate}, cv {cv}")
    shape = 1.0 / cv**2
    return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=n))


THINK_TIME_DISTS = ("constant", "exponential")


def think_times(n: int, mean_s: float, rng: np.random.Generator, dist: str = "constant") -> np.ndarray:
    """``n`` think times of mean ``mean_s`` seconds: all equal (``constant``, the engine's
    ``workload.think_time_s`` semantics) or ``exponential`` (memoryless users)."""
    if mean_s < 0:
        raise ConfigError(f"workload.think_time_s must be non-negative, got {mean_s}")
    if dist not in THINK_TIME_DISTS:
        raise ConfigError(f"think time distribution must be one of {', '.join(THINK_TIME_DISTS)}, got {dist!r}")
    if dist == "constant" or mean_s == 0:
        return np.full(n, float(mean_s))
    return rng.exponential(mean_s, size=n)
