"""The region builder: the kernels of one region's layers, with their FLOPs, weight,
activation, KV and collective bytes for ONE of m microbatches (``model.graph.build_graph``
drives it; the batch accounting is in ``model.graph``'s module docstring, the per-group
datatypes, the busiest rank's experts and the MoE collectives in docs/accounting.md).
"""

from __future__ import annotations

import math

from subgpu_jax.model.deployment import Deployment
from subgpu_jax.model.hardware import DTYPE_BYTES
from subgpu_jax.model.kernel import Kernel, gemm_ctas, stream_ctas
from subgpu_jax.model.kvsplit import SPLIT_SMS, num_kv_splits
from subgpu_jax.model.localshapes import LocalShapes
from subgpu_jax.model.models import ModelArch
from subgpu_jax.model.routing import busiest_rank_load, dispatch_bytes, rank_count_variance

__all__ = ["RegionBuilder"]


class RegionBuilder:
    """Appends the kernels of one region's layers for ONE of m microbatches (``graph.build_graph``
    drives it; the accounting is in ``model.graph``'s module docstring). Weight bytes and GEMM
    rates follow each module group's datatype (``ModelArch.dtypes``: attention projections,
    dense MLPs, shared and routed experts; the router and norms in ``weight_dtype``), in each
    layer as its kind says (``unquantised``: the groups that layer keeps in ``weight_dtype``).

    Args:
        arch: the model. deploy: the deployment (validated by the caller). m: microbatches.

    Attributes:
        kernels: the kernels appended so far. edges: their data dependencies (indices).
        params: parameters of this GPU's weight objects so far.
    """

    def __init__(self, arch: ModelArch, deploy: Deployment, m: int) -> None:
        self.arch, self.deploy, self.m = arch, deploy, m
        self.shapes = ls = LocalShapes.of(arch, deploy)
        self.t, self.e, self.H, self.qh, self.kvh = ls.t, ls.e, ls.H, ls.qh, ls.kvh
        self.ab = self.wb = DTYPE_BYTES[arch.weight_dtype]  # activations in the weight dtype
        self.kvb = DTYPE_BYTES[arch.kv_dtype]
        self.Rm = deploy.requests_per_gpu // m  # attention requests per microbatch
        self.x = self.Rm * self.H * self.ab
        self.kernels: list[Kernel] = []
        self.edges: list[tuple[int, int]] = []
        self.params = 0.0

    def add(self, **kw) -> int:
        """Append a ``Kernel(**kw)``; returns its index."""
        self.kernels.append(Kernel(**kw))
        return len(self.kernels) - 1

    # ------------------------------------------------------------------ attention
    def attention(self, j: int, kind: str, unquantised: str = "") -> tuple[int, int]:
        """Norm .. attention all-reduce of layer j (``unquantised``: the layer's
        ``ModelArch.unquantised_layers`` entry); returns (first, last) kernel indices."""
        arch, H, Rm, x, wb = self.arch, self.H, self.Rm, self.x, self.wb
        pre = f"L{j}."
        resid_in = f"resid.{j}"
        i_norm = self.add(name=pre + "rmsnorm", op="rmsnorm", category="norm_qkv", layer=j,
                          flops=4.0 * Rm * H, dtype=arch.weight_dtype, tensor=False,
                          weight_objects=((pre + "attn_norm.w", H * wb),),
                          act_reads=((resid_in, x),), act_writes=((pre + "xn", x),),
                          ctas=max(1, Rm))
        self.params += H
        sliding = kind == "sliding"
        L_kv = self.deploy.kv_tokens(arch.sliding_window if sliding else None)
        chain = [i_norm]
        aw, adt = arch.dtypes("attn", unquantised)  # weight, GEMM datatypes
        proj = (DTYPE_BYTES[aw], adt)
        chain += (self._mla(j, L_kv, sliding, *proj) if arch.is_mla
                  else self._gqa(j, L_kv, sliding, *proj))
        # output residual: attention all-reduce + residual add + post-attention norm
        t = self.t
        self.params += H
        i_ar = self.add(name=pre + ("allreduce" if t > 1 else "residual_norm"),
                        op="allreduce" if t > 1 else "residual_norm", category="out_residual",
                        layer=j, flops=6.0 * Rm * H, dtype=arch.weight_dtype, tensor=False,
                        weight_objects=((pre + "mlp_norm.w", H * wb),),
                        act_reads=((pre + "o_part", x), (resid_in, x)),
                        act_writes=((pre + "h", x), (pre + "hn", x)),
                        **self.deploy.comm_split(2.0 * (t - 1) / t * x, t, "allreduce"),
                        ctas=stream_ctas(4 * x))
        chain.append(i_ar)
        self.edges += list(zip(chain, chain[1:]))
        return i_norm, i_ar

    def _gqa(self, j: int, L_kv: int, sliding: bool, awb: float, adt: str) -> list[int]:
        """QKV, RoPE + KV append, attention, output projection (grouped-query attention; the
        projections' weights take ``awb`` bytes and their GEMMs run at ``adt``)."""
        arch, H, Rm, x, ab, wb = self.arch, self.H, self.Rm, self.x, self.ab, self.wb
        qh, kvh, hd, kvb = self.qh, self.kvh, arch.head_dim, self.kvb
        pre = f"L{j}."
        nq = self.shapes.nq
        bias = arch.attn_bias or arch.qkv_bias
        wq = H * nq * awb + (nq * wb if bias else 0)
        self.params += H * nq + (nq if bias else 0)
        i_qkv = self.add(name=pre + "qkv", op="qkv", category="norm_qkv", layer=j,
                         flops=2.0 * Rm * H * nq, dtype=adt, tensor=True,
                         weight_objects=((pre + "qkv.w", wq),),
                         act_reads=((pre + "xn", x),), act_writes=((pre + "qkv", Rm * nq * ab),),
                         ctas=gemm_ctas(Rm, nq, H, wq))
        kv_new = Rm * kvh * hd * 2 * kvb
        i_rope = self.add(name=pre + "rope_kv", op="rope_kv", category="norm_qkv", layer=j,
                          flops=6.0 * Rm * nq, dtype=arch.weight_dtype, tensor=False,
                          weight_objects=((pre + "qk_norm.w", 2 * hd * wb),) if arch.qk_norm
                          else (),
                          act_reads=((pre + "qkv", Rm * nq * ab),),
                          act_writes=((pre + "q", Rm * qh * hd * ab),),
                          kv_bytes=kv_new, ctas=stream_ctas(Rm * nq * ab * 2))
        if arch.qk_norm:
            self.params += 2 * hd
        kv_read = Rm * L_kv * kvh * hd * 2 * kvb
        # split-KV as the runtime's kernels split it (model.kvsplit): (request, KV head)
        # programs, each history cut in up to 64 splits of >= 128 positions to fill the SMs
        splits = num_kv_splits(max(1, Rm * kvh), max(1, math.ceil(L_kv)), SPLIT_SMS)
        sinks = ((pre + "sinks", qh * 4.0),) if arch.attention_sinks else ()
        self.params += qh if arch.attention_sinks else 0  # this GPU's 1/t share of the sinks
        i_attn = self.add(name=pre + "attn", op="attn",
                          category="attn_sliding" if sliding else "attn_full", layer=j,
                          flops=4.0 * Rm * qh * L_kv * hd, dtype=arch.kv_dtype, tensor=True,
                          weight_objects=sinks,
                          act_reads=((pre + "q", Rm * qh * hd * ab),),
                          act_writes=((pre + "attn_out", Rm * qh * hd * ab),),
                          kv_bytes=kv_read, ctas=max(1, Rm * kvh * splits))
        i_o = self._o_proj(j, qh * hd, awb, adt)
        return [i_qkv, i_rope, i_attn, i_o]

    def _o_proj(self, j: int, width: int, awb: float, adt: str) -> int:
        """The output projection of layer ``j``'s attention: ``width`` (this GPU's heads x
        value head dim) -> hidden, weights of ``awb`` bytes per element (+ a bias when the
        model has one), GEMM at ``adt``; its output is the partial sum the all-reduce adds."""
        H, Rm, ab, wb, pre, bias = self.H, self.Rm, self.ab, self.wb, f"L{j}.", self.arch.attn_bias
        wo = width * H * awb
        self.params += width * H + (H if bias else 0)
        return self.add(name=pre + "o_proj", op="o_proj", category="out_residual", layer=j,
                        flops=2.0 * Rm * width * H, dtype=adt, tensor=True,
                        weight_objects=((pre + "o.w", wo + (H * wb if bias else 0)),),
                        act_reads=((pre + "attn_out", Rm * width * ab),),
                        act_writes=((pre + "o_part", self.x),),
                        ctas=gemm_ctas(Rm, H, width, wo))

    def _mla(self, j: int, L_kv: int, sliding: bool, awb: float, adt: str) -> list[int]:
        """Multi-head latent attention in decode with absorbed projections (DeepSeek-V3; the
        projections' weights take ``awb`` bytes and their GEMMs run at ``adt``):

        * ``mla_down``: x @ [W_DQ | W_DKV | W_KR] (h -> q_lora + kv_lora + rope), replicated on
          every TP rank (each GPU runs it for its group's Rm requests);
        * ``mla_q_up``: latent norms, q = c_q @ W_UQ (this GPU's qh heads of nope + rope), then
          the nope part absorbed into latent space, q_nope @ W_UK (qh heads x nope -> kv_lora);
        * ``rope_kv``: RoPE of q_rope and k_rope, append (kv_lora + rope) elements per token to
          the compressed KV cache (one head shared by all query heads);
        * ``attn``: MQA over the compressed cache, 2*L*(kv_lora + rope) FLOPs per head for the
          scores + 2*L*kv_lora for the values; the cache is read whole by every TP rank;
        * ``mla_v_up``: W_UV absorbed after attention (qh heads x kv_lora -> v_head_dim);
        * ``o_proj``: qh*v_head_dim -> h.
        """
        a, H, Rm, x, ab, wb, qh, kvb = (self.arch, self.H, self.Rm, self.x, self.ab, self.wb,
                                        self.qh, self.kvb)
        pre = f"L{j}."
        ls = self.shapes
        c, r, nope, v, ql = ls.c, ls.r, ls.nope, ls.v, ls.ql
        nd = ls.nd  # down-projection width ql + c + r (query direct when q_lora is 0)
        w_down = H * nd * awb
        self.params += H * nd
        i_dn = self.add(name=pre + "mla_down", op="mla_down", category="norm_qkv", layer=j,
                        flops=2.0 * Rm * H * nd, dtype=adt, tensor=True,
                        weight_objects=((pre + "mla_down.w", w_down),),
                        act_reads=((pre + "xn", x),), act_writes=((pre + "latent", Rm * nd * ab),),
                        ctas=gemm_ctas(Rm, nd, H, w_down))
        q_in = ql if ql else H
        n_q = q_in * qh * (nope + r)
        n_uk = qh * nope * c
        w_up = (n_q + n_uk) * awb + (ql + c) * wb  # projections + the two latent norms
        self.params += n_q + n_uk + ql + c
        i_qu = self.add(name=pre + "mla_q_up", op="mla_q_up", category="norm_qkv", layer=j,
                        flops=2.0 * Rm * (n_q + n_uk), dtype=adt, tensor=True,
                        weight_objects=((pre + "mla_q_up.w", w_up),),
                        act_reads=((pre + "latent", Rm * nd * ab),),
                        act_writes=((pre + "q_lat", Rm * qh * (c + r) * ab),),
                        ctas=gemm_ctas(Rm, qh * (nope + r), q_in, w_up))
        kv_new = Rm * (c + r) * kvb
        i_rope = self.add(name=pre + "rope_kv", op="rope_kv", category="norm_qkv", layer=j,
                          flops=6.0 * Rm * (qh + 1) * r, dtype=a.weight_dtype, tensor=False,
                          act_reads=((pre + "q_lat", Rm * qh * (c + r) * ab),
                                     (pre + "latent", Rm * (c + r) * ab)),
                          act_writes=((pre + "q", Rm * qh * (c + r) * ab),),
                          kv_bytes=kv_new, ctas=stream_ctas(Rm * qh * (c + r) * ab * 2))
        kv_read = Rm * L_kv * (c + r) * kvb
        splits = num_kv_splits(max(1, Rm * max(1, qh // 64)), max(1, math.ceil(L_kv)), SPLIT_SMS)
        i_attn = self.add(name=pre + "attn", op="attn",
                          category="attn_sliding" if sliding else "attn_full", layer=j,
                          flops=2.0 * Rm * qh * L_kv * (2 * c + r), dtype=a.kv_dtype, tensor=True,
                          act_reads=((pre + "q", Rm * qh * (c + r) * ab),),
                          act_writes=((pre + "attn_lat", Rm * qh * c * ab),),
                          kv_bytes=kv_read, ctas=max(1, Rm * splits * max(1, qh // 64)))
        n_uv = qh * c * v
        self.params += n_uv
        i_vu = self.add(name=pre + "mla_v_up", op="mla_v_up", category="out_residual", layer=j,
                        flops=2.0 * Rm * n_uv, dtype=adt, tensor=True,
                        weight_objects=((pre + "mla_v_up.w", n_uv * awb),),
                        act_reads=((pre + "attn_lat", Rm * qh * c * ab),),
                        act_writes=((pre + "attn_out", Rm * qh * v * ab),),
                        ctas=gemm_ctas(Rm, qh * v, c, n_uv * awb))
        i_o = self._o_proj(j, qh * v, awb, adt)
        return [i_dn, i_qu, i_rope, i_attn, i_vu, i_o]

    # ------------------------------------------------------------------ MLPs
    def dense(self, j: int, i_ar: int, unquantised: str = "") -> int:
        """Dense SwiGLU MLP split over attention TP + all-reduce/residual (``unquantised``: as
        ``attention``); returns the last."""
        arch, H, Rm, x, ab, wb, t = self.arch, self.H, self.Rm, self.x, self.ab, self.wb, self.t
        pre = f"L{j}."
        I = self.shapes.I
        bias = arch.mlp_bias
        mw, mdt = arch.dtypes("dense_mlp", unquantised)
        mwb = DTYPE_BYTES[mw]
        w_up = H * 2 * I * mwb + (2 * I * wb if bias else 0)
        w_dn = I * H * mwb + (H * wb if bias else 0)
        self.params += 3 * H * I + ((2 * I + H) if bias else 0)
        i_up = self.add(name=pre + "mlp_up", op="mlp_up", category="mlp", layer=j,
                        flops=2.0 * Rm * H * 2 * I, dtype=mdt, tensor=True,
                        weight_objects=((pre + "mlp_up.w", w_up),),
                        act_reads=((pre + "hn", x),), act_writes=((pre + "act", Rm * I * ab),),
                        ctas=gemm_ctas(Rm, 2 * I, H, w_up))
        i_dn = self.add(name=pre + "mlp_down", op="mlp_down", category="mlp", layer=j,
                        flops=2.0 * Rm * I * H, dtype=mdt, tensor=True,
                        weight_objects=((pre + "mlp_down.w", w_dn),),
                        act_reads=((pre + "act", Rm * I * ab),), act_writes=((pre + "y", x),),
                        ctas=gemm_ctas(Rm, H, I, w_dn))
        i_c = self.add(name=pre + ("mlp_allreduce" if t > 1 else "mlp_residual"),
                       op="allreduce" if t > 1 else "residual", category="combine", layer=j,
                       flops=Rm * H, dtype=arch.weight_dtype, tensor=False,
                       act_reads=((pre + "y", x), (pre + "h", x)),
                       act_writes=((f"resid.{j + 1}", x),),
                       **self.deploy.comm_split(2.0 * (t - 1) / t * x, t, "allreduce"),
                       ctas=stream_ctas(3 * x))
        self.edges += [(i_ar, i_up), (i_up, i_dn), (i_dn, i_c), (i_ar, i_c)]
        return i_c

    def moe(self, j: int, i_ar: int, unquantised: str = "") -> int:
        """Router, top-k, dispatch, (shared experts), expert GEMMs, combine (``unquantised``: as
        ``attention``); returns the last.

        Expert parallelism e on n GPUs: the n/e EP groups are replicas, each serving the tokens
        of its n/e share of the GPUs, so a GPU receives G*k/n assignments per step whatever e
        (G*k/(n*m) per microbatch). The busiest EP rank (``Deployment.routing``) receives f
        times that, and the distinct local experts whose weights it reads follow its load
        (``routing.busiest_rank_load``; docs/accounting.md item 2).

        Each GPU routes Tr = Rm/t tokens, its 1/t share of its attention group's. Dispatch
        sends them to the experts' ranks: one copy per selected expert on another rank,
        Tr*k*h*(e-1)/e activations (``Deployment.dispatch`` ``per-expert``), or one per
        destination rank, Tr*h*``remote_ranks_per_token`` (``per-rank``, the expert side
        pre-reducing the combine; item 4); the combine returns what the busiest expert rank
        received, f times a sender's share. With attention TP t > 1
        the t ranks of a group each hold the MoE output of their Tr tokens only, and the next
        layer's attention needs all Rm on every rank: the combine ends with an all-gather over
        the t ranks, (t-1)/t * Rm*h activations sent per GPU (item 3). The shared experts run
        TP-split on all Rm tokens; their partial sums are reduce-scattered ((t-1)/t * Rm*h)
        to the Tr-token owners before that all-gather.
        """
        arch, H, Rm, x, ab, wb, t, e = (self.arch, self.H, self.Rm, self.x, self.ab, self.wb,
                                        self.t, self.e)
        dep, m = self.deploy, self.m
        ew, xdt = arch.dtypes("experts", unquantised)  # GEMMs at the activation dtype's rate
        eb = DTYPE_BYTES[ew]
        pre = f"L{j}."
        E, k, El, F = self.shapes.E, arch.top_k, self.shapes.El, self.shapes.F
        Tr = Rm / t  # tokens this GPU routes per microbatch
        load = busiest_rank_load(E, k, e, dep.global_batch, dep.num_gpus, m,
                                 dep.expert_load_factor(k, m, rank_count_variance(
                                     E, k, e, arch.n_group, arch.topk_group)))
        A, hit = load.assignments, load.experts_hit  # the busiest EP rank's
        wr = H * E * wb + (E * wb if arch.mlp_bias else 0)
        self.params += H * E + (E if arch.mlp_bias else 0) + (E if arch.n_group else 0)
        i_r = self.add(name=pre + "router", op="router", category="router_dispatch", layer=j,
                       flops=2.0 * Tr * H * E, dtype=arch.weight_dtype, tensor=True,
                       weight_objects=((pre + "router.w", wr),),
                       act_reads=((pre + "hn", Tr * H * ab),),
                       act_writes=((pre + "logits", Tr * E * 4.0),),
                       ctas=gemm_ctas(Tr, E, H, wr))
        i_tk = self.add(name=pre + "topk", op="topk", category="router_dispatch", layer=j,
                        flops=Tr * E * math.log2(max(E, 2)), dtype="fp32", tensor=False,
                        act_reads=((pre + "logits", Tr * E * 4.0),),
                        act_writes=((pre + "topk", Tr * k * 8.0),),
                        ctas=max(1, math.ceil(Tr / 32)))
        send = Tr * k * H * ab
        a2a = dispatch_bytes(Tr, H * ab, E, k, e, dep.dispatch,  # to other EP ranks, per GPU
                             arch.n_group, arch.topk_group)
        i_d = self.add(name=pre + "dispatch", op="dispatch", category="router_dispatch", layer=j,
                       flops=0.0, dtype=arch.weight_dtype, tensor=False,
                       act_reads=((pre + "hn", send), (pre + "topk", Tr * k * 8.0)),
                       act_writes=((pre + "x_exp", A * H * ab),),
                       **dep.comm_split(a2a, e, "alltoall"),
                       ctas=stream_ctas(send + A * H * ab))
        chain = [i_r, i_tk, i_d]
        back = (t - 1) / t * x  # the all-gather to the t attention ranks (t > 1)
        if arch.num_shared_experts:
            # shared experts: a dense SwiGLU MLP of n_shared*F split over attention TP on the
            # group's Rm tokens; its partial sums are reduce-scattered with the combine
            sw, sdt = arch.dtypes("shared_experts", unquantised)
            sb = DTYPE_BYTES[sw]
            Fs = self.shapes.Fs
            ws_up, ws_dn = H * 2 * Fs * sb, Fs * H * sb
            self.params += 3 * H * Fs
            i_su = self.add(name=pre + "shared_up", op="mlp_up", category="mlp", layer=j,
                            flops=2.0 * Rm * H * 2 * Fs, dtype=sdt, tensor=True,
                            weight_objects=((pre + "shared_up.w", ws_up),),
                            act_reads=((pre + "hn", x),),
                            act_writes=((pre + "shared_act", Rm * Fs * ab),),
                            ctas=gemm_ctas(Rm, 2 * Fs, H, ws_up))
            i_sd = self.add(name=pre + "shared_down", op="mlp_down", category="mlp", layer=j,
                            flops=2.0 * Rm * Fs * H, dtype=sdt, tensor=True,
                            weight_objects=((pre + "shared_down.w", ws_dn),),
                            act_reads=((pre + "shared_act", Rm * Fs * ab),),
                            act_writes=((pre + "shared_y", x),),
                            ctas=gemm_ctas(Rm, H, Fs, ws_dn))
            chain += [i_su, i_sd]
            self.edges += [(i_ar, i_su)]
            back += (t - 1) / t * x  # reduce-scatter of the shared partial sums
            if not dep.moe_tp_gather:  # before the fix: the shared partial sums all-reduced
                back = 2.0 * (t - 1) / t * x
        w_up = hit * (H * 2 * F * eb + (2 * F * wb if arch.mlp_bias else 0))
        w_dn = hit * (F * H * eb + (H * wb if arch.mlp_bias else 0))
        self.params += El * (3 * H * F + ((2 * F + H) if arch.mlp_bias else 0))
        i_up = self.add(name=pre + "expert_up", op="expert_up", category="mlp", layer=j,
                        flops=2.0 * A * H * 2 * F, dtype=xdt, tensor=True,
                        weight_objects=((pre + "experts_up.w", w_up),),
                        act_reads=((pre + "x_exp", A * H * ab),),
                        act_writes=((pre + "act_exp", A * F * ab),),
                        ctas=gemm_ctas(A, 2 * F * hit, H, w_up))
        i_dn = self.add(name=pre + "expert_down", op="expert_down", category="mlp", layer=j,
                        flops=2.0 * A * F * H, dtype=xdt, tensor=True,
                        weight_objects=((pre + "experts_down.w", w_dn),),
                        act_reads=((pre + "act_exp", A * F * ab),),
                        act_writes=((pre + "y_exp", A * H * ab),),
                        ctas=gemm_ctas(A, H * hit, F, w_dn))
        reads = ((pre + "y_exp", A * H * ab), (pre + "h", x))
        if arch.num_shared_experts:
            reads += ((pre + "shared_y", x),)
        # the combine returns what the busiest expert rank received: f times a sender's share
        comm = dep.comm_split(a2a * load.load_factor, e, "alltoall")
        if not dep.moe_tp_gather:  # the step as priced before docs/accounting.md item 3
            comm = dep.comm_split(a2a * load.load_factor + (back if arch.num_shared_experts
                                                            else 0.0), e, "alltoall")
        elif t > 1:  # + the gather back to the t attention ranks (and the shared reduce-scatter)
            tp = dep.comm_split(back, t, "allreduce")
            comm = {"comm_bytes": comm["comm_bytes"] + tp["comm_bytes"],
                    "scaleout_bytes": comm["scaleout_bytes"] + tp["scaleout_bytes"],
                    "scaleout_Bps": comm["scaleout_Bps"] or tp["scaleout_Bps"]}
        i_c = self.add(name=pre + "combine", op="combine", category="combine", layer=j,
                       flops=(2.0 * Tr * k * H + Rm * H) if dep.moe_tp_gather
                       else 2.0 * Rm * k * H, dtype=arch.weight_dtype, tensor=False,
                       act_reads=reads, act_writes=((f"resid.{j + 1}", x),),
                       **comm, ctas=stream_ctas(A * H * ab + 2 * x))
        chain += [i_up, i_dn, i_c]
        self.edges += list(zip(chain, chain[1:])) + [(i_ar, i_r), (i_ar, i_d), (i_d, i_up),
                                                      (i_ar, i_c)]
        return i_c
