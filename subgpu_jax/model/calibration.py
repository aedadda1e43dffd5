"""Load a measured calibration file into the simulators.

A calibration file (JSON, written by ``hw_runtime.gpu.calibrate`` / ``subgpu calibrate``) holds, for
one model + deployment (all fields but the global batch) on one GPU type:

* ``kernels``: per distinct kernel (keyed by its analytical signature ``kernel_key``: op,
  category, FLOPs, bytes, payload; the same key for every kernel of identical shape and work),
  its time alone (µs, median of CUDA-graph replays) on SM pools of ``pools`` SMs (green contexts)
  and on the whole GPU (``num_sms``). Real PyTorch ops are often several CUDA kernels
  (``rope_kv`` is 9), so these times include the launch gaps inside an op;
* ``bw_curve``: device-to-device copy bandwidth (read + write bytes / s) on each pool size and on
  the whole GPU: the HBM bandwidth-response curve of the contention model. It is stored as
  measured; once HBM saturates a larger pool may measure up to ``BW_NOISE`` (1%) less than a
  smaller one (noise: the H200's 128-SM pool gave 4,043.6 GB/s, the whole GPU 4,035.0), which is
  accepted and flattened (``apply_to_hardware`` uses the running maximum); a larger fall is
  refused;
* ``coruns`` (optional): co-running pairs (held out for validation; not used by the fit).

How the simulators use it:

* ``CalibratedDurationModel.table(graph)``: the (n, N+1) duration table of the max-plus
  evaluator and the search's cheap estimator, from the measured tables, interpolated piecewise
  linearly in 1/SMs (exact for times proportional to 1/SMs) between measured pools (a pool above
  the largest green pool and below the whole GPU interpolates towards the whole-GPU time).
  Outside the measured pools (a stage smaller than the smallest pool) the time is extrapolated
  with the analytical model (``graph.StaticDurationModel`` on the calibrated hardware) scaled to
  the nearest measurement, t(p) = t_meas(p0) * t_model(p) / t_model(p0), and a
  ``CalibrationExtrapolationWarning`` is issued once per calibration.
* ``ContentionModel(calibration=cal)``: the event simulator keeps its rate model (bandwidth
  sharing, L2, power cap) but each calibrated kernel alone reproduces its measured time:
  ``contention.BoundModel.work`` adds a fixed latency phase (launch-bound ops) or scales the
  kernel's work counters down (kernels faster than the analytical model), solved once per
  (kernel, pool) by simulating the kernel alone.
* ``Calibration.apply_to_hardware(hw)``: ``hw`` with the measured bandwidth-response curve and copy peak.
* ``Calibration.bind(hw)``: all of the above at once, as one ``model.setup.GpuSetup`` (the
  patched hardware, the calibrated duration model, the calibration for the contention model and
  the L2 policy ``"none"``): what every entry point uses.

Bad files raise a one-line ``ValueError`` (missing fields, non-positive / NaN times, another
model / deployment / GPU than the workload).
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from subgpu_jax.model.graph import Deployment, Kernel, OpGraph, build_graph
from subgpu_jax.model.hardware import Hardware
from subgpu_jax.model.setup import GpuSetup

__all__ = ["measured_weights_dtype", "FORMAT", "Calibration", "CalibratedDurationModel", "kernel_key", "stored_key", "load_calibration",
           "DEPLOY_FIELDS", "CalibrationExtrapolationWarning", "BW_NOISE"]


class CalibrationExtrapolationWarning(UserWarning):
    """A kernel time was needed on a pool outside the calibration's measured pools."""

#: Format tag written into every calibration file.
FORMAT = "subgpu-calibration/1"
#: The fall of copy bandwidth (fraction) from one pool to a larger one that ``bw_curve`` may
#: hold as noise: 10 timed 1 GiB copies on a saturated HBM repeat within a few tenths of a
#: percent (H200 2026-11-29: 4,230 GB/s at 128 SMs, 4,245 whole; a later run of
#: ``subgpu calibrate`` 4,043.6 at 128, 4,035.0 whole: -0.21%). A larger fall is a bad curve.
BW_NOISE = 0.01
#: Deployment fields a calibration is bound to (the global batch is free: several are stored).
DEPLOY_FIELDS = ("num_gpus", "attn_tp", "attn_dp", "moe_ep", "input_len", "kv_history")


def kernel_key(k: Kernel) -> str:
    """Analytical signature of a kernel: ``op|category|FLOPs|hbm bytes|comm bytes|ctas``.

    Two kernels with the same key run the same PyTorch op on the same shapes (L0.rmsnorm and
    L1.rmsnorm of GPT-OSS share one), so one measurement serves both. Decode attention's CTA
    field is ``split``: the runtime's split-KV kernels choose their grid from the pool at
    launch (``model.kvsplit``), so the shapes alone name the kernel (and files written before
    the model took the runtime's split rule keep matching, ``stored_key``).
    """
    ctas = "split" if k.op == "attn" else str(int(k.ctas))
    return f"{k.op}|{k.category}|{k.flops:.9g}|{k.hbm_bytes:.9g}|{k.comm_bytes:.9g}|{ctas}"


def stored_key(key: str) -> str:
    """A calibration file's kernel key as :func:`kernel_key` writes it now (attention's CTA
    count, written by older files, becomes ``split``)."""
    return key.rsplit("|", 1)[0] + "|split" if key.startswith("attn|") else key


def _num(v: Any, what: str, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"calibration: {what} must be a number, got {v!r}")
    x = float(v)
    if not math.isfinite(x):
        raise ValueError(f"calibration: {what} must be finite, got {v!r}")
    if positive and x <= 0:
        raise ValueError(f"calibration: {what} must be > 0, got {v!r}")
    return x


def _need(d: Mapping, key: str, where: str) -> Any:
    if not isinstance(d, Mapping):
        raise ValueError(f"calibration: {where} must be an object, got {type(d).__name__}")
    if key not in d:
        raise ValueError(f"calibration: missing field {where}.{key}" if where else
                         f"calibration: missing field {key}")
    return d[key]


@dataclass(frozen=True, eq=False)
class Calibration:
    """A validated calibration (see the module docstring). Compared by identity.

    Attributes:
        model: model name (``ModelArch.name``). hardware: GPU preset name. num_sms: SMs of the
            measured device. expert_dtype: datatype of the expert weights that ran.
        deployment: the ``DEPLOY_FIELDS`` of the deployment. global_batches: batches measured.
        tables: kernel key -> ``(sms (ascending, float), times µs)`` arrays.
        names: kernel key -> a kernel name it was measured as (for reports).
        bw_sms, bw_Bps: the copy bandwidth curve (SMs, bytes/s), ascending in SMs.
        coruns: the held-out co-run measurements (list of dicts).
        activity_counts: kernel key -> device activities (CUDA kernels, memcpys, memsets) one
            launch of the op issues, measured with the profiler (optional ``activities`` field of
            a kernel entry; used by the kernel-aware contention model's launch phase).
        meta: free-form provenance (device, driver, torch, date, protocol).
    """

    model: str
    hardware: str
    num_sms: int
    expert_dtype: str
    deployment: Mapping[str, int]
    global_batches: tuple[int, ...]
    tables: Mapping[str, tuple[np.ndarray, np.ndarray]]
    names: Mapping[str, str]
    bw_sms: tuple[float, ...]
    bw_Bps: tuple[float, ...]
    coruns: tuple = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    activity_counts: Mapping[str, int] = field(default_factory=dict)
    _state: dict = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, d: Mapping) -> "Calibration":
        """Validate and build from the JSON object.

        Raises:
            ValueError: one line naming the missing/bad field.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"calibration: the file must hold a JSON object, got "
                             f"{type(d).__name__}")
        fmt = _need(d, "format", "")
        if fmt != FORMAT:
            raise ValueError(f"calibration: format must be {FORMAT!r}, got {fmt!r}")
        model = _need(d, "model", "")
        hwname = _need(d, "hardware", "")
        if not isinstance(model, str) or not model or not isinstance(hwname, str) or not hwname:
            raise ValueError("calibration: model and hardware must be non-empty strings")
        num_sms = int(_num(_need(d, "num_sms", ""), "num_sms"))
        dep = _need(d, "deployment", "")
        depd = {}
        for f in DEPLOY_FIELDS:
            v = _need(dep, f, "deployment")
            depd[f] = int(_num(v, f"deployment.{f}"))
        gb = _need(d, "global_batches", "")
        if not isinstance(gb, list) or not gb:
            raise ValueError("calibration: global_batches must be a non-empty list")
        gbs = tuple(int(_num(x, "global_batches[]")) for x in gb)
        ks = _need(d, "kernels", "")
        if not isinstance(ks, list) or not ks:
            raise ValueError("calibration: kernels must be a non-empty list")
        tables, names, acts = {}, {}, {}
        for i, e in enumerate(ks):
            if not isinstance(e, Mapping):
                raise ValueError(f"calibration: kernels[{i}] must be an object")
            key = _need(e, "key", f"kernels[{i}]")
            if not isinstance(key, str) or key.count("|") != 5:
                raise ValueError(f"calibration: kernels[{i}].key {key!r} is not a kernel key")
            key = stored_key(key)
            if key in tables:
                raise ValueError(f"calibration: kernels[{i}].key {key!r} is duplicated")
            times = _need(e, "times_us", f"kernels[{i}]")
            if not isinstance(times, Mapping) or not times:
                raise ValueError(f"calibration: kernels[{i}].times_us must map SMs to µs")
            pts = []
            for p, v in times.items():
                try:
                    sms = int(p)
                except (TypeError, ValueError):
                    raise ValueError(f"calibration: kernels[{i}].times_us key {p!r} is not an SM "
                                     "count") from None
                if not 1 <= sms <= num_sms:
                    raise ValueError(f"calibration: kernels[{i}].times_us has a pool of {sms} SMs "
                                     f"(device has {num_sms})")
                pts.append((sms, _num(v, f"kernels[{i}].times_us[{p}]")))
            pts.sort()
            tables[key] = (np.array([p for p, _ in pts], float), np.array([v for _, v in pts]))
            names[key] = str(e.get("name", key))
            if "activities" in e:
                acts[key] = int(_num(e["activities"], f"kernels[{i}].activities"))
        bw = _need(d, "bw_curve", "")
        if bw is None:  # calibrate(copy_curve=False): the experiments' per-workload fit data
            raise ValueError("calibration: bw_curve is null: this file was measured without "
                             "the copy-bandwidth curve (an experiment's fit data, not a "
                             "calibration); give a file written by subgpu calibrate")
        sms = _need(bw, "sms", "bw_curve")
        gbps = _need(bw, "copy_GBps", "bw_curve")
        if not isinstance(sms, list) or not isinstance(gbps, list) or len(sms) != len(gbps) \
                or len(sms) < 2:
            raise ValueError("calibration: bw_curve.sms and bw_curve.copy_GBps must be lists of "
                             "the same length >= 2")
        pts = [(_num(s, "bw_curve.sms[]"), _num(g, "bw_curve.copy_GBps[]") * 1e9)
               for s, g in zip(sms, gbps)]
        if any(b[0] <= a[0] for a, b in zip(pts, pts[1:])):
            raise ValueError("calibration: bw_curve.sms must increase strictly")
        for a, b in zip(pts, pts[1:]):  # a saturated copy repeats within ~1%: BW_NOISE
            if b[1] < a[1] * (1.0 - BW_NOISE):
                raise ValueError(
                    f"calibration: bw_curve.copy_GBps falls from {a[1] / 1e9:,.1f} GB/s at "
                    f"{a[0]:g} SMs to {b[1] / 1e9:,.1f} GB/s at {b[0]:g} SMs; a larger pool may "
                    f"lose at most {BW_NOISE:.0%} (measurement noise), re-measure the curve")
        if pts[-1][0] > num_sms:
            raise ValueError(f"calibration: bw_curve has a pool of {pts[-1][0]:g} SMs, more than "
                             f"the device's {num_sms}")
        return cls(model=model, hardware=hwname, num_sms=num_sms,
                   expert_dtype=str(d.get("expert_dtype", "")), deployment=depd,
                   global_batches=gbs, tables=tables, names=names,
                   bw_sms=tuple(p for p, _ in pts), bw_Bps=tuple(b for _, b in pts),
                   coruns=cls._coruns(d.get("coruns")), meta=dict(d.get("meta", {}) or {}),
                   activity_counts=acts)

    @staticmethod
    def _coruns(c) -> tuple:
        """Validate the held-out co-running measurements: a list of objects (or absent)."""
        if c is None:
            return ()
        if not isinstance(c, list) or any(not isinstance(x, Mapping) for x in c):
            raise ValueError("calibration: coruns must be a list of objects")
        return tuple(c)

    @classmethod
    def load(cls, path: str) -> "Calibration":
        """Read and validate a calibration JSON file.

        Raises:
            ValueError: unreadable file, invalid JSON, or a bad field (one line).
        """
        try:
            with open(path) as fh:
                d = json.load(fh)
        except OSError as e:
            raise ValueError(f"calibration: cannot read {path}: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"calibration: {path} is not valid JSON ({e.msg} at line "
                             f"{e.lineno})") from None
        except UnicodeDecodeError:
            raise ValueError(f"calibration: {path} is not a text file (a JSON calibration "
                             "written by subgpu calibrate)") from None
        try:
            return cls.from_dict(d)
        except ValueError as e:  # name the file (the flag's value) beside the bad field
            msg = str(e)
            if msg.startswith("calibration: "):
                msg = msg[len("calibration: "):]
            raise ValueError(f"calibration {path}: {msg}") from None

    # ------------------------------------------------------------------ checks
    def check_workload(self, arch, deploy: Deployment, hw: Hardware) -> None:
        """Refuse a workload this calibration was not measured for.

        Raises:
            ValueError: another model, expert datatype, GPU type or deployment (names the field).
        """
        if arch.name != self.model:
            raise ValueError(f"calibration is for model {self.model!r}, the workload is "
                             f"{arch.name!r}")
        if self.expert_dtype and arch.is_moe and arch.expert_dtype != self.expert_dtype:
            raise ValueError(f"calibration measured {self.expert_dtype} experts, the workload "
                             f"has {arch.expert_dtype} (pass --expert-dtype {self.expert_dtype}; in "
                             f"Python, build it with hopper_arch)")
        if hw.name != self.hardware or hw.num_sms != self.num_sms:
            raise ValueError(f"calibration is for {self.hardware} ({self.num_sms} SMs), the "
                             f"workload runs on {hw.name} ({hw.num_sms} SMs)")
        for f in DEPLOY_FIELDS:
            if int(getattr(deploy, f)) != int(self.deployment[f]):
                raise ValueError(f"calibration is for deployment {f}={self.deployment[f]}, the "
                                 f"workload has {f}={getattr(deploy, f)}")

    def check_grid(self, arch, points: Iterable[tuple[Deployment, int]]) -> None:
        """Every graph of a sweep measured: ``check_graph`` on ``build_graph(arch, deploy, m)``
        of each distinct (deployment, microbatch count) of ``points``, before any is scored
        (a sweep that stored a point and then met an unmeasured kernel would be timed partly by
        the analytical model).

        Raises:
            ValueError: as ``check_graph``, for the first graph with an unmeasured kernel.
        """
        for dep, m in dict.fromkeys(points):
            self.check_graph(build_graph(arch, dep, m))

    def check_graph(self, graph: OpGraph) -> None:
        """Every kernel of ``graph`` must have a measured table.

        Raises:
            ValueError: names the first kernel without one (and the batch / microbatch count).
        """
        for k in graph.kernels:
            if kernel_key(k) not in self.tables:
                dep = graph.deployment
                gb = dep.global_batch if dep is not None else "?"
                hint = ""
                if k.op.startswith("expert") and not self.expert_dtype:
                    hint = ("; the file names no expert_dtype: if its experts ran in another "
                            "datatype than the workload's (Hopper runs them in bf16), pass "
                            "--expert-dtype to match")
                elif k.op == "combine" and dep is not None and dep.attn_tp > 1:
                    hint = ("; a calibration measured before the combine's all-gather over the "
                            "attention TP ranks was priced (docs/accounting.md item 3) lacks it: "
                            "re-measure with subgpu calibrate")
                raise ValueError(f"calibration has no measurement of kernel {k.name} at global "
                                 f"batch {gb} with {graph.microbatches} microbatch(es) "
                                 f"(measured batches: {list(self.global_batches)}){hint}")

    # ------------------------------------------------------------------ lookups
    def has(self, k: Kernel) -> bool:
        """True when kernel ``k`` has a measured table."""
        return kernel_key(k) in self.tables

    def activities(self, k: Kernel) -> int | None:
        """Device activities one launch of ``k`` issues (measured), or None when unknown."""
        return self.activity_counts.get(kernel_key(k))

    def kernel_time_us(self, k: Kernel, sms: float) -> float | None:
        """Measured time (µs) of ``k`` alone on ``sms`` SMs, interpolated linearly in 1/SMs
        between measured pools and extrapolated outside them (``times``); None when ``k`` was
        not measured."""
        if kernel_key(k) not in self.tables:
            return None
        return float(self.times(k, np.asarray([float(sms)]))[0])

    def times(self, k: Kernel, sms: np.ndarray, warn: bool = True) -> np.ndarray:
        """Time (µs) of the measured kernel ``k`` alone on each pool of ``sms`` (array of SMs):
        linear in 1/SMs between measured pools; outside them the analytical model scaled to the
        nearest measured pool p0, t_meas(p0) * t_model(p) / t_model(p0), with one
        ``CalibrationExtrapolationWarning`` per calibration when ``warn`` (``table`` fills every
        pool size and does not warn; the simulators ask for the pools they use).

        Raises:
            ValueError: ``k`` was not measured.
        """
        t = self.tables.get(kernel_key(k))
        if t is None:
            raise ValueError(f"calibration has no measurement of kernel {k.name}")
        sms_m, ts = t
        p = np.atleast_1d(np.asarray(sms, float))
        out = _interp_inv(p, sms_m, ts)
        lo, hi = p < sms_m[0], p > sms_m[-1]
        if lo.any() or hi.any():
            model = self._model()
            for mask, p0, t0 in ((lo, sms_m[0], ts[0]), (hi, sms_m[-1], ts[-1])):
                if mask.any():
                    ref = float(model.kernel_time_us(k, float(p0)))
                    out[mask] = t0 * model.kernel_time_us(k, p[mask]) / ref
            if warn and not self._state.get("warned"):
                self._state["warned"] = True
                bad = float(p[lo | hi][0])
                warnings.warn(
                    f"calibration: a pool of {bad:g} SMs is outside the measured pools "
                    f"({sms_m[0]:g}..{sms_m[-1]:g} SMs for kernel {k.name}); such times are "
                    "extrapolated with the analytical model scaled to the nearest measurement "
                    "(warned once per calibration)", CalibrationExtrapolationWarning,
                    stacklevel=2)
        return out

    def _model(self):
        """The analytical duration model on the calibrated hardware preset (cached)."""
        m = self._state.get("model")
        if m is None:
            from subgpu_jax.model.graph import StaticDurationModel
            from subgpu_jax.model.hardware import get_hardware

            try:
                hw = get_hardware(self.hardware)
            except ValueError:
                raise ValueError(f"calibration: hardware {self.hardware!r} is not a preset, so "
                                 "times outside the measured pools cannot be extrapolated; "
                                 "measure the pool sizes you simulate") from None
            if hw.num_sms != self.num_sms:
                raise ValueError(f"calibration: the {self.hardware} preset has {hw.num_sms} "
                                 f"SMs, the calibration {self.num_sms}")
            m = self._state["model"] = StaticDurationModel(self.apply_to_hardware(hw))
        return m

    def apply_to_hardware(self, hw: Hardware) -> Hardware:
        """``hw`` with the measured copy-bandwidth curve (fractions of the whole-GPU copy) and
        copy peak (``hbm_copy_Bps`` = the largest pool's copy bandwidth; the read ceiling is kept
        at its ratio to the copy ceiling).

        Raises:
            ValueError: another GPU type.
        """
        if hw.name != self.hardware or hw.num_sms != self.num_sms:
            raise ValueError(f"calibration is for {self.hardware}, not {hw.name}")
        peak = self.bw_Bps[-1]
        x = (0.0,) + tuple(s / self.num_sms for s in self.bw_sms)
        y = (0.0,) + tuple(min(1.0, b / peak) for b in self.bw_Bps)
        y = tuple(float(v) for v in np.maximum.accumulate(np.asarray(y)))
        ratio = hw.hbm_read_Bps / hw.hbm_copy_Bps
        return dataclasses.replace(hw, bw_curve_x=x, bw_curve_y=y, hbm_copy_Bps=peak,
                                   hbm_read_Bps=peak * ratio,
                                   source=hw.source + " Calibrated: bandwidth curve and copy "
                                   "peak from the calibration file.")

    def bind(self, hw: Hardware) -> GpuSetup:
        """Everything this calibration changes, bound to ``hw``, as one ``GpuSetup``: ``hw``
        patched by ``apply_to_hardware``, ``CalibratedDurationModel`` on it, this calibration
        (the contention model's) and the L2 policy ``"none"`` (module docstring).

        Raises:
            ValueError: another GPU type (as ``apply_to_hardware``).
        """
        patched = self.apply_to_hardware(hw)
        return GpuSetup(hw=patched, calibration=self,
                        duration_model=CalibratedDurationModel(self, patched), cache="none")

    def table(self, graph: OpGraph, num_sms: int) -> np.ndarray:
        """Duration table (n, num_sms+1) µs of ``graph`` (column p = time on p SMs; column 0 = 1 SM).

        Raises:
            ValueError: a kernel without a measurement (``check_graph``).
        """
        self.check_graph(graph)
        p = np.arange(num_sms + 1, dtype=float)
        p[0] = 1.0
        return np.stack([self.times(k, p, warn=False) for k in graph.kernels])

    def to_dict(self) -> dict:
        """The JSON object (``from_dict`` round-trips it)."""
        return {"format": FORMAT, "model": self.model, "hardware": self.hardware,
                "num_sms": self.num_sms, "expert_dtype": self.expert_dtype,
                "deployment": dict(self.deployment), "global_batches": list(self.global_batches),
                "kernels": [{"key": k, "name": self.names.get(k, k),
                             "times_us": {str(int(s)): float(v) for s, v in zip(*self.tables[k])},
                             **({"activities": int(self.activity_counts[k])}
                                if k in self.activity_counts else {})}
                            for k in self.tables],
                "bw_curve": {"sms": [float(s) for s in self.bw_sms],
                             "copy_GBps": [b / 1e9 for b in self.bw_Bps]},
                "coruns": list(self.coruns), "meta": dict(self.meta)}


def _interp_inv(p: np.ndarray, sms: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation of ``ts`` over x = 1/sms, clamped at the ends (callers
    extrapolate outside: ``Calibration.times``)."""
    x = 1.0 / np.asarray(p, float)
    xs = 1.0 / sms[::-1]
    ys = ts[::-1]
    return np.interp(x, xs, ys)


def measured_weights_dtype(path) -> str | None:
    """The ``weights_dtype`` a calibration file says every module group was measured in
    (``"bf16"``: the GPU runtime's all-bf16 build, ``ModelArch.all_bf16``), or None when the
    file does not say (older files) or cannot be read (``load_calibration`` reports that)."""
    try:
        with open(path) as fh:
            v = json.load(fh).get("weights_dtype")
    except (OSError, ValueError, AttributeError, UnicodeDecodeError):
        return None
    return v if v == "bf16" else None


def load_calibration(path: str, arch=None, deploy: Deployment | None = None,
                     hw: Hardware | None = None) -> Calibration:
    """``Calibration.load(path)``, checked against a workload when ``arch``/``deploy``/``hw``
    are given.

    Raises:
        ValueError: a bad file or a mismatch (one line).
    """
    cal = Calibration.load(path)
    if arch is not None and deploy is not None and hw is not None:
        cal.check_workload(arch, deploy, hw)
    return cal


class CalibratedDurationModel:
    """Duration model with the ``table(graph)`` interface of ``graph.StaticDurationModel``,
    backed by a calibration (for ``evaluator.Evaluator`` and ``search.Problem``).

    Args:
        calibration: the measurements. hw: the GPU (``num_sms`` columns).

    Raises:
        ValueError: from ``table`` when a kernel was not measured.
    """

    def __init__(self, calibration: Calibration, hw: Hardware) -> None:
        if not isinstance(calibration, Calibration):
            raise ValueError(f"calibration must be a Calibration, got "
                             f"{type(calibration).__name__}")
        self.cal, self.hw = calibration, hw

    def table(self, graph: OpGraph, max_sms: int | None = None) -> np.ndarray:
        """(graph.n, N+1) µs, column p = measured time on p SMs (interpolated)."""
        return self.cal.table(graph, self.hw.num_sms if max_sms is None else int(max_sms))

    def kernel_time_us(self, k: Kernel, sms) -> np.ndarray:
        """Measured time (µs) of ``k`` on ``sms`` SMs (array-like).

        Raises:
            ValueError: ``k`` was not measured.
        """
        return self.cal.times(k, np.atleast_1d(np.asarray(sms, float)), warn=False)
