"""Expert-parallel routing arithmetic (pure Python): the distinct experts a set of routed tokens
hits, the load and experts of the busiest EP rank, and the copies of a token the MoE dispatch
sends (per expert, or deduplicated per destination rank). The graph builder
(``model.builder``) and the GPU workload (``hw_runtime``) both use it, so the simulator and the
runtime charge the same counts.

Routing is uniform top-k (every token picks k distinct experts out of E, each k-subset equally
likely). Group-limited routing (DeepSeek-V3: the E experts in ``n_group`` groups, a token's k
experts from its ``topk_group`` best groups) is modelled as uniform too: the token picks
``topk_group`` of the groups, each choice equally likely, then k distinct experts among theirs.
The per-expert load stays k/E (the busiest rank's load and distinct experts are unchanged);
the destination ranks of a token are fewer: a token's experts lie in at most ``topk_group``
groups (``remote_ranks_per_token``; docs/accounting.md, items 2 and 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["expected_distinct", "RankLoad", "busiest_rank_load", "remote_ranks_per_token",
           "dispatch_bytes", "DISPATCH_MODES", "rank_count_variance"]

#: MoE dispatch payloads: ``per-expert`` sends one copy of a token per selected expert on another
#: rank (k (e-1)/e copies per token on average); ``per-rank`` sends one copy per destination rank
#: holding at least one of its experts (``remote_ranks_per_token``), the expert side expanding
#: it locally and pre-reducing the combine (as DeepEP's and other deduplicating all-to-alls do).
DISPATCH_MODES = ("per-expert", "per-rank")


def expected_distinct(n_items: int, draws: float, picks_per_draw: int = 1) -> float:
    """Expected number of distinct items hit when ``draws`` draws each pick ``picks_per_draw``
    distinct items uniformly from ``n_items``: n * (1 - (1 - k/n)^draws).

    Used for the distinct experts a microbatch's tokens touch under uniform routing.
    """
    if n_items <= 0:
        return 0.0
    return n_items * (1.0 - (1.0 - picks_per_draw / n_items) ** draws)


@dataclass(frozen=True)
class RankLoad:
    """What the busiest EP rank of a microbatch receives.

    Attributes:
        assignments: A, token-expert assignments it receives (mean G*k/(n*m) times
            ``load_factor``).
        experts_hit: expected distinct local experts those A assignments hit (<= E/e, <= A):
            whose weights the expert GEMMs read.
        group_tokens: T = G*e/(n*m), tokens its EP group routes per microbatch.
        load_factor: f >= 1, busiest rank's load / mean (``Deployment.expert_load_factor``).
    """

    assignments: float
    experts_hit: float
    group_tokens: float
    load_factor: float


def busiest_rank_load(num_experts: int, top_k: int, moe_ep: int, global_batch: int,
                      num_gpus: int, microbatches: int, load_factor: float = 1.0) -> RankLoad:
    """Assignments and distinct local experts of the busiest EP rank for one microbatch.

    With T = G*e/(n*m) tokens routed by the EP group, a mean rank receives T*k/e assignments
    and hits El*(1 - (1 - k/E)^T) of its El = E/e experts. The busiest rank receives f times
    the mean, A = f*T*k/e, i.e. as many as a mean rank would if its group routed f*T tokens, so
    its distinct experts are El*(1 - (1 - k/E)^(f*T)) (expected distinct experts given its
    load; exact for f = 1, the first-order expectation for f > 1), capped at A (a fraction of a
    token, f*T < 1, would otherwise hit more experts than it has assignments). Under uniform
    routing (f = 1) this is the mean rank, unchanged.

    Args:
        num_experts: E. top_k: k. moe_ep: e. global_batch: G. num_gpus: n. microbatches: m.
        load_factor: f >= 1.

    Returns:
        ``RankLoad`` (assignments and experts per microbatch).
    """
    E, k, e = num_experts, top_k, moe_ep
    T = global_batch * e / (num_gpus * microbatches)
    A = global_batch * k / (num_gpus * microbatches) * load_factor
    # never more experts than assignments (the formula exceeds A when f*T < 1 token)
    hit = min(expected_distinct(E, T * load_factor, k) * (E // e) / E, A)
    return RankLoad(assignments=float(A), experts_hit=float(hit), group_tokens=float(T),
                    load_factor=float(load_factor))


def _none_of(n: int, held: int, k: int) -> float:
    """C(n - held, k) / C(n, k): k distinct items drawn from n miss all ``held`` of them."""
    p = 1.0
    for i in range(k):  # as a product, no big integers
        p *= max(0.0, (n - held - i) / (n - i))
    return p


def remote_ranks_per_token(num_experts: int, top_k: int, moe_ep: int, n_group: int = 0,
                           topk_group: int = 0) -> float:
    """Expected number of OTHER EP ranks that hold at least one of a token's k experts (one
    copy each with per-rank deduplication), (e - 1) * (1 - P(a given rank holds none)); the
    experts are split in e contiguous blocks of El = E/e.

    Plain top-k: P(none) = C(E - El, k) / C(E, k) (hypergeometric). Equals k (e-1)/e, the
    per-expert copies, when each rank holds one expert (El = 1), and is smaller otherwise.

    Group-limited (``n_group`` g groups of Eg = E/g experts, ``topk_group`` q of them per token,
    k experts among their q*Eg): a rank holding j whole groups (El = j*Eg) has s of them picked
    with the hypergeometric P(s) = C(j, s) C(g - j, q - s) / C(g, q) and then holds none of the
    k with C(q Eg - s Eg, k) / C(q Eg, k); a rank holding a part of one group (El < Eg) has it
    picked with q/g, then none with C(q Eg - El, k) / C(q Eg, k). DeepSeek-V3 (E 256, k 8, g 8,
    q 4) on EP8, one group per rank: P(none) = 1/2 + 1/2 x C(96, 8)/C(128, 8) = 0.54637, so
    7 x 0.45363 = 3.1754 copies, where plain top-8 gives 4.6328 (46% more).

    Raises:
        ValueError: ``n_group`` that does not divide E, ``topk_group`` outside 1..n_group, or
            groups that do not tile the ranks (neither El nor Eg a multiple of the other).
    """
    E, k, e = num_experts, top_k, moe_ep
    if e <= 1:
        return 0.0
    El = E // e
    if not n_group:
        return (e - 1) * (1.0 - _none_of(E, El, k))
    g, q = int(n_group), int(topk_group)
    if g < 1 or E % g or not 1 <= q <= g:
        raise ValueError(f"n_group/topk_group: {g} groups of {E} experts, {q} per token: need "
                         f"n_group dividing the experts and 1 <= topk_group <= n_group")
    Eg = E // g
    n = q * Eg  # the experts of a token's picked groups
    if El < Eg:
        if Eg % El:
            raise ValueError(f"n_group: {El} experts per EP rank do not tile a group of {Eg}")
        none = (1.0 - q / g) + q / g * _none_of(n, El, k)
    else:
        if El % Eg:
            raise ValueError(f"n_group: {El} experts per EP rank are not whole groups of {Eg}")
        j = El // Eg
        none = sum(math.comb(j, s) * math.comb(g - j, q - s) / math.comb(g, q)
                   * _none_of(n, s * Eg, k) for s in range(0, min(j, q) + 1))
    return (e - 1) * (1.0 - none)


def rank_count_variance(num_experts: int, top_k: int, moe_ep: int, n_group: int = 0,
                        topk_group: int = 0) -> float | None:
    """Variance of the number of a token's k experts that one EP rank holds, under
    group-limited routing (the mean is k/e either way), or None without groups (the caller's
    multinomial k (1/e)(1 - 1/e) stands).

    A rank holding j whole groups of Eg (or a part El < Eg of one, j = 1) has s of them picked
    with the hypergeometric P(s) of ``remote_ranks_per_token``; given s it holds X of the k
    experts drawn from the picked q*Eg, X hypergeometric with K = s*Eg (or El) of N = q*Eg:
    E[X | s] = k K/N, Var = k (K/N)(1 - K/N)(N - k)/(N - 1). Var X = E[E[X^2 | s]] - (k/e)^2.
    DeepSeek-V3 on EP8 (a group per rank): 1/2 x (1.4173 + 4) - 1 = 1.7087, about twice the
    multinomial 8 x 1/8 x 7/8 = 0.875, so its busiest rank is busier at small batch.

    Raises:
        ValueError: as ``remote_ranks_per_token``.
    """
    E, k, e = num_experts, top_k, moe_ep
    if not n_group or e <= 1:
        return None
    remote_ranks_per_token(E, k, e, n_group, topk_group)  # the same checks
    g, q, El = int(n_group), int(topk_group), E // e
    Eg = E // g
    N = q * Eg
    if El < Eg:
        cases = [(1.0 - q / g, 0), (q / g, El)]
    else:
        j = El // Eg
        cases = [(math.comb(j, s) * math.comb(g - j, q - s) / math.comb(g, q), s * Eg)
                 for s in range(0, min(j, q) + 1)]
    m2 = 0.0
    for p, K in cases:
        mean = k * K / N
        var = k * (K / N) * (1 - K / N) * (N - k) / (N - 1) if N > 1 else 0.0
        m2 += p * (var + mean * mean)
    return m2 - (k / e) ** 2


def dispatch_bytes(tokens: float, token_bytes: float, num_experts: int, top_k: int, moe_ep: int,
                   mode: str = "per-expert", n_group: int = 0, topk_group: int = 0) -> float:
    """Bytes one GPU's dispatch sends to the other EP ranks (the combine returns as much from a
    mean expert rank).

    Args:
        tokens: Tr, tokens the GPU routes (per microbatch). token_bytes: bytes of one token's
            activation (h * activation datatype bytes). num_experts: E. top_k: k. moe_ep: e.
        mode: ``"per-expert"``: Tr * k * (e-1)/e copies (a token's copy per selected expert,
            those on its own rank staying local); ``"per-rank"``: Tr * ``remote_ranks_per_token``
            copies (one per other rank holding any of its experts; ``n_group`` and
            ``topk_group``: group-limited routing, see there).

    Returns:
        bytes sent per GPU.

    Raises:
        ValueError: a mode not in ``DISPATCH_MODES``.
    """
    if mode == "per-expert":
        copies = top_k * (moe_ep - 1) / moe_ep
    elif mode == "per-rank":
        copies = remote_ranks_per_token(num_experts, top_k, moe_ep, n_group, topk_group)
    else:
        raise ValueError(f"dispatch must be one of {', '.join(DISPATCH_MODES)}, got {mode!r}")
    return float(tokens * copies * token_bytes)
