"""A tiny deterministic stand-in for `gym` (not installed here): `gym.make(name)` gives a
CartPole-like environment with gym >= 0.26's API (`reset()` -> (obs, info), `step(a)` ->
(obs, reward, terminated, truncated, info)). Observations are 4 float64 values; the
start state is drawn from NumPy's global generator (so a process seeded otherwise starts
elsewhere: the shim seeds every process alike unless DISTRUN_SHIM_SEED_BY_RANK); the
dynamics are a fixed linear map of the state and the action; every episode terminates
after EPISODE_STEPS steps (1001: two episodes fill minimalRL's dqn.py's 2000-transition
warm-up), reward 1.0 a step."""

import numpy as np

__version__ = "0.26.2"

EPISODE_STEPS = 1001


class _CartPoleLike:
    def __init__(self, name):
        self.name = name
        self.state = None
        self.t = 0

    def reset(self, seed=None, options=None):
        if seed is not None:
            np.random.seed(seed)
        self.state = np.random.uniform(-0.05, 0.05, size=4)
        self.t = 0
        return self.state.copy(), {}

    def step(self, action):
        a = float(int(action)) - 0.5
        s = self.state
        self.state = np.array([
            s[0] + 0.02 * s[1],
            0.98 * s[1] + 0.1 * a,
            s[2] + 0.02 * s[3],
            0.97 * s[3] - 0.05 * a + 0.01 * s[2],
        ])
        self.t += 1
        terminated = self.t >= EPISODE_STEPS
        return self.state.copy(), 1.0, terminated, False, {}

    def close(self):
        pass


def make(name, **kwargs):
    return _CartPoleLike(name)
