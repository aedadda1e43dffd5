"""A whole generation instead of one frozen decode step (docs/accounting.md, item 6).

A request with a prompt of I tokens that generates N tokens runs N decode steps; step s
(s = 0..N-1) reads a KV history of I + s tokens (``Deployment.step``). With all G requests of the
batch decoding together, the time per output token averaged over the generation is

    TPOT = (1/N) * sum_{s=0}^{N-1} T(I + s)                                            [µs]

and the generation's throughputs are 1e6 / TPOT tokens/s per user and (G/n) * 1e6 / TPOT
tokens/s per GPU. Simulating all N steps would cost N simulations; ``generation_nodes`` gives a
three-point rule instead, Simpson's weights (1/6, 4/6, 1/6) on the first, middle and last steps,
with the middle step rounded to an integer and the end weights corrected so that the rule stays
exact when T is linear in s (attention's KV reads are; the rest of the step does not depend on
s), and close to exact when contention bends it. With N <= 3 every step is simulated.
"""

from __future__ import annotations

from subgpu_jax.model.deployment import Deployment

__all__ = ["generation_nodes", "generation_steps", "search_step"]


def generation_nodes(output_len: int) -> list[tuple[int, float]]:
    """``[(s, weight), ...]``: the decode steps s (0-based) simulated for a generation of
    ``output_len`` tokens and their weights (summing to 1) in the mean step time.

    N <= 3: every step, weight 1/N. Otherwise s = 0, M = round((N-1)/2), N-1 with weights
    w_M = 2/3, w_end = ((N-1)/2 - (2/3)*M) / (N-1), w_0 = 1/3 - w_end (Simpson's 1/6, 4/6, 1/6
    when N is odd): sum_i w_i s_i = (N-1)/2, the mean of s, so a step time linear in s averages
    exactly.

    Raises:
        ValueError: ``output_len`` < 1.
    """
    N = output_len
    if isinstance(N, bool) or not isinstance(N, int) or N < 1:
        raise ValueError(f"output_len must be a positive number of tokens, got {N!r}")
    if N <= 3:
        return [(s, 1.0 / N) for s in range(N)]
    M = round((N - 1) / 2)
    w_end = ((N - 1) / 2 - (2.0 / 3.0) * M) / (N - 1)
    return [(0, 1.0 / 3.0 - w_end), (M, 2.0 / 3.0), (N - 1, w_end)]


def generation_steps(deploy: Deployment) -> list[tuple[Deployment, float]]:
    """``[(single-step deployment, weight), ...]`` of ``deploy``'s generation
    (``generation_nodes(deploy.output_len)`` applied with ``Deployment.step``); the deployment
    itself with weight 1 when it is one step (``output_len`` 0)."""
    if not deploy.output_len:
        return [(deploy, 1.0)]
    return [(deploy.step(s), w) for s, w in generation_nodes(int(deploy.output_len))]


def search_step(deploy: Deployment) -> Deployment:
    """The step a search optimises for: the middle step of a generation (the mean KV history,
    where a step time linear in s equals the generation's mean), else ``deploy``."""
    if not deploy.output_len:
        return deploy
    return deploy.step(round((int(deploy.output_len) - 1) / 2))
