"""What ``subgpu tune`` tunes: the options (``TuneSpec``), the configurations it measures
(``Candidate``) and the model's prediction of a configuration as it is executed (``Predictor``).

Pure CPU (no torch). Units: µs for makespans, SMs for pools, seconds for GPU time.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping

from hw_runtime.commands.request import KernelSettings, Timing as RunTiming
from hw_runtime.gpu.executor import DEFAULT_LANE_PRIORITY
from hw_runtime.gpu.policies import KERNEL_DEFAULTS
from subgpu_jax.app.args import DEFAULT_L_SIM, grid_default
from subgpu_jax.model.collective import DEFAULT_COLLECTIVES
from subgpu_jax.model.graph import Deployment, OpGraph
from subgpu_jax.model.hardware import Hardware, get_hardware
from subgpu_jax.model.models import ModelArch
from subgpu_jax.score.timer import DEFAULT_TIMER, TIMERS, Timer
from subgpu_jax.search.strategies import (DEFAULT_ALLOC_STRATEGY, DEFAULT_CHEAP,
                                          DEFAULT_CUT_STRATEGY)
from subgpu_jax.space.config import DEFAULT_POLICY, Config

__all__ = ["TuneSpec", "Candidate", "Predictor", "RUN_MODES"]

#: How a candidate runs on the GPU (``hw_runtime.gpu.executor.MODES``).
RUN_MODES = ("temporal", "green", "multistream")

#: ``TuneSpec.exact`` left out: the default timer (``score.timer.DEFAULT_TIMER``), made for the
#: spec's GPU (uncalibrated) when the spec is made.
_DEFAULT_EXACT: Timer = object()   # type: ignore[assignment]


@dataclass(frozen=True)
class TuneSpec:
    """The options of one tune.

    Attributes:
        arch: the model as it runs on the GPU (``hopper_arch``: bf16 experts on Hopper).
        hardware: GPU preset name (the local GPU). num_gpus, attn_tp, attn_dp, moe_ep,
            kv_history, input_len: the deployment (tokens for the lengths).
        batches: global batches G; stages: stage counts D (>= 2); microbatches: counts m;
            policies: dispatch policies; streams: streams per stage k: the search grid.
        exact: the search's exact scorer, a ``score.timer.Timer`` of the registry
            (``TIMERS``) made once at the command line's edge (``timer_for``, as ``subgpu
            search`` makes its own; default: ``DEFAULT_TIMER`` for this GPU, uncalibrated).
            Each round's search makes it again by its name for that round's calibration
            (``timer_for``); ``meta`` writes the name; ``Predictor`` asks it whether it models
            contention (``score.timer.predicting_timer``). cheap, cut_strategy,
            alloc_strategy, l_sim: the search's cheap estimator and strategies
            (``subgpu_jax.app.searchjob.PointScorer``).
        cache: the L2 policy asked for (None: ``none`` once a calibration is in use, else lru).
        calibration: path of the starting calibration (None: the uncalibrated model).
        top: candidates K measured per batch and round. budget_s: GPU seconds for the whole
            tune. tolerance: relative agreement of predicted and measured speedups that ends the
            loop (0.03). max_rounds: search rounds at most. refine: refine the best on the GPU;
            refine_passes: pass limit of Algorithm 2 there.
        collectives: ``sleep``, ``proxy`` or ``none`` (``subgpu run --collectives``); gemm, elementwise,
            attention, moe_gemm,
            lane_priority: the runtime's kernel choices; rounds, replays, warmup: the timing
            protocol of one measurement (rounds and warm-up default to ``subgpu run``'s,
            ``commands.request.Timing``; fewer replays). model_arg: ``--model`` as given (for
            the printed commands; default the model's name).

    Raises:
        ValueError: a bad value, one line naming the ``subgpu tune`` flag.
    """

    arch: ModelArch
    hardware: str
    num_gpus: int
    attn_tp: int
    attn_dp: int
    moe_ep: int
    kv_history: int
    input_len: int
    batches: tuple[int, ...]
    stages: tuple[int, ...] = grid_default("stages")
    microbatches: tuple[int, ...] = grid_default("microbatches")
    policies: tuple[str, ...] = (DEFAULT_POLICY,)
    streams: tuple[int, ...] = grid_default("streams_per_stage")
    exact: Timer = _DEFAULT_EXACT
    cheap: str = DEFAULT_CHEAP
    cut_strategy: str = DEFAULT_CUT_STRATEGY
    alloc_strategy: str = DEFAULT_ALLOC_STRATEGY
    cut_options: str | None = None
    alloc_options: str | None = None
    l_sim: int = DEFAULT_L_SIM
    cache: str | None = None
    calibration: str | None = None
    top: int = 3
    budget_s: float = 300.0
    tolerance: float = 0.03
    max_rounds: int = 4
    refine: bool = True
    refine_passes: int = 2
    collectives: str = DEFAULT_COLLECTIVES
    gemm: str = KERNEL_DEFAULTS["gemm"]
    elementwise: str = KERNEL_DEFAULTS["elementwise"]
    attention: str = KERNEL_DEFAULTS["attention"]
    moe_gemm: str = KERNEL_DEFAULTS["moe_gemm"]
    lane_priority: str = DEFAULT_LANE_PRIORITY
    rounds: int = RunTiming.rounds
    replays: int = 20
    warmup: int = RunTiming.warmup
    model_arg: str = ""

    def __post_init__(self) -> None:
        for f, lo in (("top", 1), ("max_rounds", 1), ("refine_passes", 1), ("rounds", 1),
                      ("replays", 1), ("warmup", 0), ("l_sim", 1)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"--{f.replace('_', '-')} must be an integer >= {lo}, got {v!r}")
        b = self.budget_s
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) \
                or b <= 0:
            raise ValueError(f"--budget-s must be a positive number of GPU seconds, got {b!r}")
        t = self.tolerance
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1:
            raise ValueError(f"--tolerance must be a fraction in (0, 1), got {t!r}")
        for f in ("batches", "microbatches", "stages", "streams"):
            v = getattr(self, f)
            if not v or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
                raise ValueError(f"--{f.replace('streams', 'streams-per-stage')} must be "
                                 f"positive integers, got {list(v)}")
        from subgpu_jax.model.collective import one_gpu_mode
        one_gpu_mode(self.collectives)   # ValueError naming --collectives
        self.strategies()                # ValueError naming --cut-options / --alloc-options
        from hw_runtime.gpu.executor import LANE_PRIORITY
        from hw_runtime.gpu.policies import check_policies
        from subgpu_jax.model.checks import choice
        check_policies({"gemm": self.gemm, "elementwise": self.elementwise,
                        "attention": self.attention, "moe_gemm": self.moe_gemm})
        choice(self.lane_priority, "--lane-priority", LANE_PRIORITY)
        if self.exact is _DEFAULT_EXACT:
            from subgpu_jax.model.setup import GpuSetup
            from subgpu_jax.score.timer import timer_for

            object.__setattr__(self, "exact", timer_for(GpuSetup.uncalibrated(self.hw),
                                                        DEFAULT_TIMER))
        if not isinstance(self.exact, Timer) or TIMERS.get(self.exact.name) is not type(
                self.exact):
            raise ValueError(f"--exact must be one of {', '.join(TIMERS)} (a timer made "
                             f"for the GPU by score.timer.timer_for), got "
                             f"{getattr(self.exact, '__name__', None) or repr(self.exact)}")
        if self.moe_gemm != "auto" and not self.arch.is_moe:
            raise ValueError(f"--moe-gemm: {self.arch.name} is a dense model without expert "
                             f"GEMMs (leave it at auto)")

    def check_cpu(self, out: str) -> None:
        """Every check that needs no GPU, before one is touched: stage counts >= 2, microbatch
        counts dividing each batch's per-GPU requests, the L2 policy, the calibration (it loads
        and fits the model, deployment and GPU), the results folder (writable), and each
        batch's deployment (memory and sharding).

        Raises:
            ValueError: one line naming the flag.
        """
        from subgpu_jax.model.checks import out_dir
        from subgpu_jax.sim.l2cache import L2_POLICIES

        if any(d < 2 for d in self.stages):
            raise ValueError(f"--stages must be stage counts >= 2, got {list(self.stages)}")
        if self.cache is not None and self.cache not in L2_POLICIES:
            raise ValueError(f"--cache must be one of {', '.join(L2_POLICIES)}, got "
                             f"{self.cache!r}")
        out_dir(out, "--out")
        for G in self.batches:
            dep = self.deployment(G)
            try:
                dep.validate(self.arch)
            except ValueError as e:
                raise ValueError(f"--batches {G}: {e}") from None
            R = dep.requests_per_gpu
            bad = [m for m in self.microbatches if R % m]
            if bad:
                raise ValueError(f"--microbatches {','.join(map(str, bad))} must divide the "
                                 f"{R} requests per GPU at --batches {G}")
        if self.calibration:
            from subgpu_jax.model.calibration import load_calibration
            try:
                cal = load_calibration(self.calibration)
                cal.check_workload(self.arch, self.deployment(self.batches[0]), self.hw)
            except ValueError as e:
                raise ValueError(f"--calibration {self.calibration}: {e}") from None

    @property
    def hw(self) -> Hardware:
        """The GPU preset (uncalibrated)."""
        return get_hardware(self.hardware)

    @property
    def kernels(self) -> KernelSettings:
        """The runtime's kernel choices (``gemm``, ``elementwise``, ``attention``,
        ``moe_gemm``, ``lane_priority``) as ``subgpu run`` takes them."""
        return KernelSettings(gemm=self.gemm, elementwise=self.elementwise,
                              attention=self.attention, moe_gemm=self.moe_gemm,
                              lane_priority=self.lane_priority)

    def deployment(self, G: int) -> Deployment:
        """The deployment at global batch ``G``."""
        return Deployment(num_gpus=self.num_gpus, attn_tp=self.attn_tp, attn_dp=self.attn_dp,
                          moe_ep=self.moe_ep, global_batch=int(G), input_len=self.input_len,
                          kv_history=self.kv_history)

    def cache_policy(self, calibrated: bool) -> str:
        """The event simulator's L2 policy for a model with (``calibrated``) or without a
        calibration: ``--cache`` when given, else ``none`` / ``lru`` (``app.options``)."""
        from subgpu_jax.app.options import resolve_cache

        return resolve_cache(self.cache, "calibrated" if calibrated else None)

    def strategies(self) -> tuple:
        """The search's (cut, allocation) strategy objects with their options
        (``search.strategies.make_strategies``).

        Raises:
            ValueError: a bad option (one line naming ``--cut-options``/``--alloc-options``)."""
        from subgpu_jax.search.strategies import make_strategies

        return make_strategies(self.cut_strategy, self.cut_options, self.alloc_strategy,
                               self.alloc_options)

    def meta(self) -> dict:
        """The JSON fingerprint of the options that decide what is measured (a tune folder
        holding another fingerprint is refused). The budget, the tolerance and the round and
        pass limits are left out: a resumed tune may extend them."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("arch", "budget_s", "tolerance", "max_rounds", "refine",
                               "refine_passes")}
        # the default attention: tune folders made before the option keep resuming while auto
        # still picks what they ran (LEGACY, SDPA; Triton for MLA counts); moe_gemm always
        # counts: folders made before it measured bmm experts, and auto now depends on the
        # batch (moe_gemm.resolve)
        from hw_runtime.gpu.decode_attn import auto_choice
        from hw_runtime.gpu.policies import LEGACY

        if d.get("attention") == "auto" and auto_choice(self.arch.is_mla) == LEGACY["attention"]:
            del d["attention"]
        if not self.arch.is_moe:
            d.pop("moe_gemm", None)
        for k in ("cut_options", "alloc_options"):   # folders made before them keep resuming
            if d.get(k) is None:
                d.pop(k, None)
        d["exact"] = self.exact.name   # the name: tune folders made before keep resuming
        d["model"] = self.arch.name
        d["expert_dtype"] = self.arch.expert_dtype
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


@dataclass(frozen=True)
class Candidate:
    """One configuration of one batch as it runs on the GPU.

    Its configuration is a ``subgpu_jax.space.config.Config``, written to and read from the
    tune's files by the search records' codec (``Config.to_record`` / ``Config.from_record``:
    cut kernel names and SMs per stage ``"|"``-joined), so a tune state written before the
    ``Config`` field resumes as it was.

    Attributes:
        G: global batch (requests). mode: ``temporal``, ``green`` or ``multistream``
            (``RUN_MODES``).
        config: the configuration (stages D, reuse w, cut, SMs per stage, microbatch size b in
            requests, dispatch policy, streams per stage k); None for ``temporal`` (its
            configuration is the workload's, ``space.config.temporal_of``).
        region: the region graph at one microbatch (``Workload.graph(1)`` of batch ``G``) whose
            kernels the cut names; None for ``temporal``. Not compared.

    Raises:
        ValueError: an unknown mode, or a configuration given to ``temporal`` or missing from
            another mode.
    """

    G: int
    mode: str
    config: Config | None = None
    region: OpGraph | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in RUN_MODES:
            raise ValueError(f"candidate mode must be one of {', '.join(RUN_MODES)}, got "
                             f"{self.mode!r}")
        if (self.mode == "temporal") != (self.config is None) or (
                self.config is not None and self.region is None):
            raise ValueError("a temporal candidate has no configuration, any other one a "
                             "Config and its region graph")

    @classmethod
    def temporal(cls, G: int) -> "Candidate":
        """The temporal baseline of batch ``G``."""
        return cls(G=int(G), mode="temporal")

    @classmethod
    def from_record(cls, rec: Mapping, region: OpGraph, mode: str = "green") -> "Candidate":
        """A SubGPU record of ``subgpu search`` (``records.csv`` row or store record) on
        ``region`` (the region graph of its batch at one microbatch) run in ``mode``.

        Raises:
            ValueError: a record that lacks a field or names no kernel of ``region`` (one
                line).
        """
        try:
            cfg = Config.from_record(rec, region)
        except KeyError as e:
            raise ValueError(f"candidate: the record lacks {e} or names no kernel of the "
                             "region") from None
        return cls(G=int(rec["global_batch"]), mode=mode, config=cfg, region=region)

    @classmethod
    def from_dict(cls, d: Mapping, region: OpGraph | None) -> "Candidate":
        """Inverse of ``as_dict`` (``region``: as for ``from_record``; None for a temporal
        candidate)."""
        if d["mode"] == "temporal":
            return cls.temporal(d["G"])
        return cls.from_record({**d, "global_batch": d["G"], "streams_per_stage": d["k"]},
                               region, d["mode"])

    def record(self) -> dict:
        """The search-record fields of the configuration (``Config.to_record``: ``D``, ``w``,
        ``K``, ``microbatches``, ``microbatch``, ``policy``, ``streams_per_stage``, ``cuts``,
        ``sms``); for ``temporal`` the fields a tune has always stored for it (D = 1, no cut,
        no SMs, microbatch 0, one stream)."""
        if self.config is None:
            return {"D": 1, "w": 0, "cuts": "", "sms": "", "microbatch": 0,
                    "policy": Config.policy, "streams_per_stage": 1}
        R = self.region.deployment.requests_per_gpu
        return self.config.to_record(self.region, self.config.microbatches(R))

    def as_dict(self) -> dict:
        """JSON-ready fields, as tune state files store a candidate: ``G``, ``mode``, ``D``,
        ``w``, ``cuts``, ``sms``, ``microbatch``, ``policy``, ``k`` (streams per stage)."""
        r = self.record()
        return {"G": self.G, "mode": self.mode, "D": r["D"], "w": r["w"], "cuts": r["cuts"],
                "sms": r["sms"], "microbatch": r["microbatch"], "policy": r["policy"],
                "k": r["streams_per_stage"]}

    @property
    def key(self) -> str:
        """A stable identifier (what a measurement is stored under)."""
        if self.mode == "temporal":
            return f"G{self.G}|temporal"
        d = self.as_dict()
        return (f"G{self.G}|{self.mode}|D{d['D']}|w{d['w']}|{d['cuts']}|{d['sms']}|"
                f"b{d['microbatch']}|k{d['k']}|{d['policy']}")

    def replace(self, mode: str | None = None, **config) -> "Candidate":
        """A copy in another ``mode`` and/or with ``Config`` fields changed (``alloc``: SMs per
        stage, made a tuple of ints; ``microbatch``; ...)."""
        if "alloc" in config:
            config["alloc"] = tuple(int(x) for x in config["alloc"])
        cfg = dataclasses.replace(self.config, **config) if config else self.config
        return dataclasses.replace(self, mode=mode or self.mode, config=cfg)

    def describe(self) -> str:
        """One short line: ``green D=2 w=1 b=32 k=1 SMs=64|64 cuts=L0.qkv|L0.mlp_up``."""
        if self.mode == "temporal":
            return "temporal"
        d = self.as_dict()
        return (f"{self.mode} D={d['D']} w={d['w']} b={d['microbatch']} k={d['k']} "
                f"SMs={d['sms']} cuts={d['cuts']}")


@dataclass
class Predictor:
    """The model's whole-step makespan of a candidate as it runs (``mode``), for one
    calibration (None: the uncalibrated model), with the timer that predicts runs for the
    tune's exact scorer (``timer``: ``score.timer.predicting_timer``).

    The event simulator predicts every mode; the static max-plus evaluator has no shared-pool
    model, so its multistream prediction is None.

    Args:
        spec: the tune. calibration: a ``Calibration`` or None.
    """

    spec: TuneSpec
    calibration: object = None
    _wl: dict = field(default_factory=dict, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)
    _setup: object = field(default=None, repr=False)
    _timers: dict = field(default_factory=dict, repr=False)

    @property
    def setup(self):
        """The simulator's ``GpuSetup``: ``calibration.bind(spec.hw)``, or the uncalibrated
        GPU (cached)."""
        if self._setup is None:
            from subgpu_jax.model.setup import GpuSetup

            self._setup = (self.calibration.bind(self.spec.hw) if self.calibration is not None
                           else GpuSetup.uncalibrated(self.spec.hw))
        return self._setup

    @property
    def hw(self) -> Hardware:
        """The simulator's GPU (with the calibration's bandwidth curve)."""
        return self.setup.hw

    @property
    def contention(self) -> bool:
        """Whether the tune's exact scorer (``spec.exact``, a timer of ``TIMERS``) models
        contention: then candidates are predicted by the event simulator (the reference), else
        by the static max-plus evaluator (``timer``)."""
        return bool(self.spec.exact.contention)

    @property
    def cache(self) -> str:
        """The event simulator's L2 policy."""
        return self.spec.cache_policy(self.calibration is not None)

    def model(self):
        """The ``ContentionModel`` (calibration, ``--collectives`` as link time)."""
        from subgpu_jax.sim.contention import ContentionModel

        from subgpu_jax.model.collective import collective_mode

        return ContentionModel(calibration=self.calibration,
                               **collective_mode(self.spec.collectives).contention_kwargs())

    def timer(self, mode: str = "green"):
        """The timer that predicts this model's runs in SM ``mode`` (``green`` or
        ``multistream``; cached): ``score.timer.predicting_timer`` of the tune's exact scorer
        for this calibration's setup, ``model()`` and ``cache`` (``Timer.in_mode``).

        Raises:
            ValueError: ``multistream`` with the static evaluator (no shared-pool model)."""
        if mode not in self._timers:
            from subgpu_jax.score.timer import predicting_timer

            if "green" not in self._timers:
                self._timers["green"] = predicting_timer(self.spec.exact, self.setup,
                                                         self.model(), self.cache)
            self._timers[mode] = self._timers["green"].in_mode(mode)
        return self._timers[mode]

    def workload(self, G: int):
        """The simulator's ``Workload`` of batch ``G`` (memory-checked; cached)."""
        if G not in self._wl:
            from subgpu_jax.model.workload import Workload

            self._wl[G] = Workload.checked(self.spec.arch, self.spec.deployment(G), self.spec.hw)
        return self._wl[G]

    def config(self, c: Candidate):
        """``(Config, m)`` of a candidate (the temporal config for ``temporal``).

        Raises:
            ValueError: a layout that is not legal for the workload (one line).
        """
        from subgpu_jax.space.config import temporal_of

        wl = self.workload(c.G)
        if c.mode == "temporal":
            return temporal_of(wl), 1
        cfg, g1 = c.config, wl.graph(1)
        cfg.check(g1.n, g1.edges, self.spec.hw, wl.batch)
        return cfg, wl.microbatches_of(cfg.microbatch)

    def candidate(self, d: Mapping) -> Candidate:
        """The ``Candidate`` of a stored one (``Candidate.as_dict``: a tune state's
        ``"candidate"``) on this tune's region graph of its batch.

        Raises:
            ValueError: a stored cut that names no kernel of the model (one line).
        """
        G = int(d["G"])
        return Candidate.from_dict(d, None if d["mode"] == "temporal"
                                   else self.workload(G).graph(1))

    def predict(self, c: Candidate) -> float | None:
        """Predicted whole-step makespan (µs), or None (static scorer, multistream)."""
        if c.key in self._memo:
            return self._memo[c.key]
        from subgpu_jax.score.step import time_step
        from subgpu_jax.model.graph import build_forward

        cfg, m = self.config(c)
        fp = build_forward(self.spec.arch, self.spec.deployment(c.G), m)
        mode = "multistream" if c.mode == "multistream" else "green"
        if mode == "multistream" and not self.contention:
            out = None
        else:
            out = float(time_step(fp, cfg, self.timer(mode), record=False).makespan_us)
        self._memo[c.key] = out
        return out

    def kernel_times(self, c: Candidate) -> dict[tuple[str, int], float]:
        """The model's mean duration (µs) of each kernel of the main region's run of ``c``, per
        (kernel key, pool SMs): in context (co-running) under the event simulator, alone
        under the static evaluator (``timer().kernel_times``). The pool of a temporal run is
        the whole GPU.

        Raises:
            ValueError: a multistream candidate (its kernels have no pool of their own).
        """
        if c.mode == "multistream":
            raise ValueError("kernel_times: multistream runs have no pools")
        cfg, m = self.config(c)
        return self.timer().kernel_times(self.workload(c.G).graph(m), cfg)

    def alone_us(self, kern, sms: int) -> float:
        """The model's time (µs) of one kernel alone on ``sms`` SMs (``timer().alone_us``):
        the calibration's table when it has the kernel, else the event simulator's lone run
        (event scorer) or the static duration model (static scorer)."""
        return self.timer().alone_us(kern, sms)
