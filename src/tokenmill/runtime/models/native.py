"""Two small C kernels for decode, compiled on first use with the system C compiler.

Why: at decode sizes the model is skinny products that MKL runs far below its peak, and on a
small CPU memory traffic, not arithmetic, sets the step time.

* ``mla_decode``: absorbed MLA decode is MQA over each sequence's latent rows (576 floats per
  token for DeepSeek). In torch it takes three passes over them: ``index_select`` gathers every
  sequence's rows out of the paged pool into one padded buffer, then a bmm computes the scores
  and a second bmm the weighted sum; the rows of a 32-request batch (~12 MiB per layer) do not
  stay in cache between passes, and the products are 4 heads wide. Measured on the 2-core box of
  ``benchmarks/vllm_cpu_compare.sh``: 1.7 ms per layer per step, about half of the decode step.
  The kernel reads each row once, straight from the pool through the cell table (no gather),
  scores it against all heads while it is in registers, and accumulates the values while the
  sequence's rows are still in L2; it also does both absorptions (W_UK into the query, W_UV
  after the softmax) head by head over the batch: 0.6-1 ms with them.
* ``moe_experts``: the routed SiLU-GLU experts for a few tokens each (decode: 2-12), where the
  per-expert GEMMs of 2-12 rows run at a fifth of MKL's peak; the kernel loads each weight row
  once per 4 tokens (0.34 ms against 0.63 ms for 96 rows over 16 experts).

Both are optional fast paths: fp32 only, one thread (the engine's setting on small machines;
with more torch threads the torch ops are parallel and stay in use), and everything falls back
to torch when there is no compiler, the build fails, or ``TOKENMILL_NATIVE=0``. The shared
object is cached under ``~/.cache/tokenmill/native`` (or ``$TOKENMILL_NATIVE_CACHE``), keyed by
the source, the flags and the machine (``-march=native``), and written atomically, so
concurrent first uses are safe. tests/runtime/models/test_native.py checks both against torch.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

_SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

typedef float v16 __attribute__((vector_size(64), aligned(4)));
#define LD(p) (*(const v16*)(p))
#define PREFETCH_ROWS 4

static inline float hsum(v16 v) {
#ifdef __AVX512F__
    __m512 x;
    memcpy(&x, &v, sizeof(x));
    return _mm512_reduce_add_ps(x);
#else
    float s = 0.f;
    for (int i = 0; i < 16; i++) s += v[i];
    return s;
#endif
}

static float dot(const float* a, const float* b, int64_t n) {
    v16 acc0 = {0}, acc1 = {0};
    int64_t c = 0;
    for (; c + 32 <= n; c += 32) {
        acc0 += LD(a + c) * LD(b + c);
        acc1 += LD(a + c + 16) * LD(b + c + 16);
    }
    float t = hsum(acc0 + acc1);
    for (; c < n; c++) t += a[c] * b[c];
    return t;
}

/* s[k * sk + j * sj] = r_j . q_k for rows r0, r1 (j = 0, 1) and q_0..q_3 (k, rows w apart, each w
   long): 8 independent FMA chains, each row and q vector loaded once per 16 columns. */
static void dots_2x4(const float* r0, const float* r1, const float* q, int64_t w, float* s, int64_t sk, int64_t sj) {
    v16 a00 = {0}, a01 = {0}, a02 = {0}, a03 = {0}, a10 = {0}, a11 = {0}, a12 = {0}, a13 = {0};
    const float *q0 = q, *q1 = q + w, *q2 = q + 2 * w, *q3 = q + 3 * w;
    int64_t c = 0;
    for (; c + 16 <= w; c += 16) {
        v16 x0 = LD(r0 + c), x1 = LD(r1 + c);
        v16 y0 = LD(q0 + c), y1 = LD(q1 + c), y2 = LD(q2 + c), y3 = LD(q3 + c);
        a00 += x0 * y0; a01 += x0 * y1; a02 += x0 * y2; a03 += x0 * y3;
        a10 += x1 * y0; a11 += x1 * y1; a12 += x1 * y2; a13 += x1 * y3;
    }
    float t00 = hsum(a00), t01 = hsum(a01), t02 = hsum(a02), t03 = hsum(a03);
    float t10 = hsum(a10), t11 = hsum(a11), t12 = hsum(a12), t13 = hsum(a13);
    for (; c < w; c++) {
        t00 += r0[c] * q0[c]; t01 += r0[c] * q1[c]; t02 += r0[c] * q2[c]; t03 += r0[c] * q3[c];
        t10 += r1[c] * q0[c]; t11 += r1[c] * q1[c]; t12 += r1[c] * q2[c]; t13 += r1[c] * q3[c];
    }
    s[0] = t00; s[sk] = t01; s[2 * sk] = t02; s[3 * sk] = t03;
    s[sj] = t10; s[sk + sj] = t11; s[2 * sk + sj] = t12; s[3 * sk + sj] = t13;
}

/* The same for four rows r0..r3 (rd apart): 16 chains, half the q loads per FMA of dots_2x4. */
static void dots_4x4(const float* r, int64_t rd, const float* q, int64_t w, float* s, int64_t sk, int64_t sj) {
    v16 a[4][4] = {{{0}}};
    const float *q0 = q, *q1 = q + w, *q2 = q + 2 * w, *q3 = q + 3 * w;
    int64_t c = 0;
    for (; c + 16 <= w; c += 16) {
        v16 y0 = LD(q0 + c), y1 = LD(q1 + c), y2 = LD(q2 + c), y3 = LD(q3 + c);
        for (int j = 0; j < 4; j++) {
            v16 x = LD(r + j * rd + c);
            a[j][0] += x * y0; a[j][1] += x * y1; a[j][2] += x * y2; a[j][3] += x * y3;
        }
    }
    for (int j = 0; j < 4; j++) {
        for (int k = 0; k < 4; k++) {
            float t = hsum(a[j][k]);
            for (int64_t e = c; e < w; e++) t += r[j * rd + e] * q[k * w + e];
            s[k * sk + j * sj] = t;
        }
    }
}

/* y[i * sy_i + k * sy_k] = x_i . m_k for n rows x_i (dx apart) and K rows m_k (w apart), w long. */
static void dots(const float* x, int64_t n, int64_t dx, const float* m, int64_t K, int64_t w, float* y, int64_t sy_i,
                 int64_t sy_k) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        int64_t k = 0;
        for (; k + 4 <= K; k += 4) dots_4x4(x + i * dx, dx, m + k * w, w, y + i * sy_i + k * sy_k, sy_k, sy_i);
        for (; k < K; k++)
            for (int j = 0; j < 4; j++) y[(i + j) * sy_i + k * sy_k] = dot(x + (i + j) * dx, m + k * w, w);
    }
    for (; i + 2 <= n; i += 2) {
        int64_t k = 0;
        for (; k + 4 <= K; k += 4)
            dots_2x4(x + i * dx, x + (i + 1) * dx, m + k * w, w, y + i * sy_i + k * sy_k, sy_k, sy_i);
        for (; k < K; k++)
            for (int j = 0; j < 2; j++) y[(i + j) * sy_i + k * sy_k] = dot(x + (i + j) * dx, m + k * w, w);
    }
    for (; i < n; i++)
        for (int64_t k = 0; k < K; k++) y[i * sy_i + k * sy_k] = dot(x + i * dx, m + k * w, w);
}

/* q_j[:C] = qn_j @ w_uk ([P] x [P, C]) for four queries j (qd apart, outputs od apart): 16 column
   vectors of accumulators in registers, one pass over w_uk's rows shared by all four. */
static void absorb_4(const float* qn, int64_t qd, const float* w_uk, int64_t P, int64_t C, float* q, int64_t od) {
    int64_t c = 0;
    for (; c + 64 <= C; c += 64) {
        v16 a[4][4] = {{{0}}};
        for (int64_t p = 0; p < P; p++) {
            const float* w = w_uk + p * C + c;
            v16 w0 = LD(w), w1 = LD(w + 16), w2 = LD(w + 32), w3 = LD(w + 48);
            for (int j = 0; j < 4; j++) {
                const float x = qn[j * qd + p];
                a[j][0] += x * w0; a[j][1] += x * w1; a[j][2] += x * w2; a[j][3] += x * w3;
            }
        }
        for (int j = 0; j < 4; j++) memcpy(q + j * od + c, a[j], sizeof(a[j]));
    }
    for (; c < C; c++)
        for (int j = 0; j < 4; j++) {
            float t = 0.f;
            for (int64_t p = 0; p < P; p++) t += qn[j * qd + p] * w_uk[p * C + c];
            q[j * od + c] = t;
        }
}

static void absorb_1(const float* qn, const float* w_uk, int64_t P, int64_t C, float* q) {
    for (int64_t c = 0; c < C; c++) q[c] = 0.f;
    for (int64_t p = 0; p < P; p++)
        for (int64_t c = 0; c < C; c++) q[c] += qn[p] * w_uk[p * C + c];
}

/* One query token per sequence, H heads over the sequence's cached rows (MQA over the latents),
   with DeepSeek's absorption on both sides:
     q[b, h]    = [q_nope[b, h] @ W_UK[h] | q_pe[b, h]]                     (width = C + R)
     o_lat[b, h] = softmax_l(scale * flat[cells[b, l]] . q[b, h]) @ flat[cells[b, l], :C],  l < lens[b]
     out[b, h]  = W_UV[h] @ o_lat[b, h]                                      ([V])
   flat [*, width]; cells [B, lmax]; q_nope [B, H, P]; q_pe [B, H, R]; w_kv [H, P + V, C]
   (kv_b_proj: W_UK rows then W_UV rows per head); ws: H * lmax + B * H * (width + C) floats.
   The absorptions run head by head over the whole batch (each head's weights stay in cache);
   attention runs sequence by sequence (each sequence's rows stay in cache). */
void mla_decode_f32(const float* flat, int64_t width, const int64_t* cells, int64_t lmax, const int64_t* lens,
                    const float* q_nope, const float* q_pe, const float* w_kv, int64_t B, int64_t H, int64_t C,
                    int64_t P, int64_t V, float scale, float* ws, float* out) {
    const int64_t R = width - C;
    float* qall = ws + H * lmax;      /* [B, H, width] */
    float* oall = qall + B * H * width;  /* [B, H, C] */
    for (int64_t h = 0; h < H; h++) {
        const float* w_uk = w_kv + h * (P + V) * C;
        int64_t b = 0;
        for (; b + 4 <= B; b += 4)
            absorb_4(q_nope + (b * H + h) * P, H * P, w_uk, P, C, qall + (b * H + h) * width, H * width);
        for (; b < B; b++) absorb_1(q_nope + (b * H + h) * P, w_uk, P, C, qall + (b * H + h) * width);
        for (b = 0; b < B; b++) memcpy(qall + (b * H + h) * width + C, q_pe + (b * H + h) * R, sizeof(float) * R);
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t L = lens[b];
        const int64_t* cb = cells + b * lmax;
        const float* qb = qall + b * H * width;
        float* ob = oall + b * H * C;
        int64_t h = 0;
        for (; h + 4 <= H; h += 4) {
            int64_t l = 0;
            for (; l + 2 <= L; l += 2) {
                if (h == 0 && l + PREFETCH_ROWS + 1 < L) {  /* rows sit in 16-row pages at random places */
                    const char* n0 = (const char*)(flat + cb[l + PREFETCH_ROWS] * width);
                    const char* n1 = (const char*)(flat + cb[l + PREFETCH_ROWS + 1] * width);
                    for (int64_t o = 0; o < width * 4; o += 64) {
                        __builtin_prefetch(n0 + o);
                        __builtin_prefetch(n1 + o);
                    }
                }
                dots_2x4(flat + cb[l] * width, flat + cb[l + 1] * width, qb + h * width, width, ws + h * L + l, L, 1);
            }
            for (; l < L; l++)
                for (int64_t k = 0; k < 4; k++)
                    ws[(h + k) * L + l] = dot(flat + cb[l] * width, qb + (h + k) * width, width);
        }
        for (; h < H; h++)
            for (int64_t l = 0; l < L; l++) ws[h * L + l] = dot(flat + cb[l] * width, qb + h * width, width);
        for (h = 0; h < H; h++) {
            float* s = ws + h * L;
            float m = -INFINITY, sum = 0.f;
            for (int64_t l = 0; l < L; l++) {
                s[l] *= scale;
                if (s[l] > m) m = s[l];
            }
            for (int64_t l = 0; l < L; l++) {
                s[l] = expf(s[l] - m);
                sum += s[l];
            }
            const float inv = 1.f / sum;
            for (int64_t l = 0; l < L; l++) s[l] *= inv;
        }
        /* 4 heads x 64 columns of accumulators in registers, one pass over the rows per block. */
        for (h = 0; h + 4 <= H; h += 4) {
            const float *p0 = ws + h * L, *p1 = p0 + L, *p2 = p1 + L, *p3 = p2 + L;
            int64_t c = 0;
            for (; c + 64 <= C; c += 64) {
                v16 o[4][4] = {{{0}}};
                for (int64_t l = 0; l < L; l++) {
                    const float* row = flat + cb[l] * width + c;
                    v16 x0 = LD(row), x1 = LD(row + 16), x2 = LD(row + 32), x3 = LD(row + 48);
                    const float ps[4] = {p0[l], p1[l], p2[l], p3[l]};
                    for (int k = 0; k < 4; k++) {
                        o[k][0] += ps[k] * x0; o[k][1] += ps[k] * x1; o[k][2] += ps[k] * x2; o[k][3] += ps[k] * x3;
                    }
                }
                for (int k = 0; k < 4; k++) memcpy(ob + (h + k) * C + c, o[k], sizeof(o[k]));
            }
            for (; c < C; c++) {
                float t[4] = {0.f, 0.f, 0.f, 0.f};
                for (int64_t l = 0; l < L; l++) {
                    const float x = flat[cb[l] * width + c];
                    t[0] += p0[l] * x; t[1] += p1[l] * x; t[2] += p2[l] * x; t[3] += p3[l] * x;
                }
                for (int k = 0; k < 4; k++) ob[(h + k) * C + c] = t[k];
            }
        }
        for (; h < H; h++) {
            const float* p = ws + h * L;
            for (int64_t c = 0; c < C; c++) {
                float t = 0.f;
                for (int64_t l = 0; l < L; l++) t += p[l] * flat[cb[l] * width + c];
                ob[h * C + c] = t;
            }
        }
    }
    /* out[b, h, v] = o_lat[b, h] . W_UV[h, v], head by head over the batch. */
    for (int64_t h = 0; h < H; h++)
        dots(oall + h * C, B, H * C, w_kv + (h * (P + V) + P) * C, V, C, out + h * V, H * V, 1);
}

/* The routed experts of a SiLU-GLU MoE for a few tokens per expert (decode):
     ys[r] = W2[e] @ (silu(W1[e] x_r) * (W3[e] x_r))  for the rows r of expert e,
   xs [N, D] sorted by expert, counts [E] rows per expert, w13 [E, 2I, D] (W1 rows then W3 rows),
   w2 [E, D, I]; ws: 2I * maxcount floats; ys [N, D]. Each weight row is loaded once per 4 tokens. */
void moe_experts_f32(const float* xs, const int64_t* counts, int64_t E, const float* w13, const float* w2,
                     int64_t D, int64_t I, float* ws, float* ys) {
    int64_t start = 0;
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = counts[e];
        if (n == 0) continue;
        const float* x = xs + start * D;
        dots(x, n, D, w13 + e * 2 * I * D, 2 * I, D, ws, 2 * I, 1);  /* ws [n, 2I] = [gate | up] */
        for (int64_t r = 0; r < n; r++) {
            float* h = ws + r * 2 * I;
            for (int64_t j = 0; j < I; j++) h[j] = h[j] / (1.f + expf(-h[j])) * h[I + j];
        }
        dots(ws, n, 2 * I, w2 + e * D * I, D, I, ys + start * D, D, 1);
        start += n;
    }
}
"""

# -march=native: the object is built for (and cached per) this machine. No -ffast-math: the
# softmax must keep IEEE exp/inf semantics; -fno-math-errno only lets expf skip errno.
_FLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fno-math-errno", "-shared", "-fPIC"]
_FALLBACK_FLAGS = ["-O3", "-fno-math-errno", "-shared", "-fPIC"]

_i64, _ptr = ctypes.c_int64, ctypes.c_void_p
_lib: ctypes.CDLL | None = None
_tried = False


def _machine_key() -> str:
    """What -march=native depends on: the host and its CPU flags (a shared home may span hosts)."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line
                break
    except OSError:
        pass
    return f"{platform.node()}|{platform.machine()}|{flags}"


def _cache_dir() -> Path:
    env = os.environ.get("TOKENMILL_NATIVE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tokenmill" / "native"


def _build() -> ctypes.CDLL | None:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        return None
    for flags in (_FLAGS, _FALLBACK_FLAGS):
        key = hashlib.sha256("\n".join([_SOURCE, cc, *flags, _machine_key()]).encode()).hexdigest()[:20]
        target = _cache_dir() / f"mla_decode-{key}.so"
        if not target.exists():
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                    src, obj = Path(tmp) / "k.c", Path(tmp) / "k.so"
                    src.write_text(_SOURCE)
                    subprocess.run([cc, *flags, "-o", str(obj), str(src)], check=True, capture_output=True, timeout=120)
                    os.replace(obj, target)  # atomic: a concurrent build just replaces it with the same
            except (OSError, subprocess.SubprocessError):
                continue
        try:
            lib = ctypes.CDLL(str(target))
        except OSError:
            continue
        fn = lib.mla_decode_f32
        fn.argtypes = [_ptr, _i64, _ptr, _i64, _ptr, _ptr, _ptr, _ptr, _i64, _i64, _i64, _i64, _i64, ctypes.c_float]
        fn.argtypes += [_ptr, _ptr]
        fn.restype = None
        moe = lib.moe_experts_f32
        moe.argtypes = [_ptr, _ptr, _i64, _ptr, _ptr, _i64, _i64, _ptr, _ptr]
        moe.restype = None
        return lib
    return None


def available() -> bool:
    """Whether the kernel can run here (builds or loads it on the first call)."""
    global _lib, _tried
    if os.environ.get("TOKENMILL_NATIVE", "1") == "0":
        return False
    if not _tried:
        _tried = True
        _lib = _build()
    return _lib is not None


def mla_decode(
    flat: torch.Tensor,
    cells: torch.Tensor,
    lens: torch.Tensor,
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    w_kv: torch.Tensor,
    scale: float,
    ws: torch.Tensor,
    check: bool = True,
) -> torch.Tensor:
    """Absorbed MLA decode attention → ``[B, H, V]`` (see ``mla_decode_f32`` in the source).

    ``flat`` [N, C + R] fp32 (the pool as rows), ``cells`` [B, Lmax] int64 rows of each
    sequence's context, ``lens`` [B] int64 context lengths (1..Lmax), ``q_nope`` [B, H, P] and
    ``q_pe`` [B, H, R] fp32 (rope applied), ``w_kv`` [H, P + V, C] fp32 (``kv_b_proj``), ``ws``
    fp32 scratch of at least H·Lmax + B·H·(2C + R). Call only when ``available()``. The kernel
    trusts every index it reads: ``check=False`` skips the range checks for a caller that has
    made them already (the engine checks page ids once per step in ``build_context``).
    """
    assert _lib is not None
    B, H, P = q_nope.shape
    R = q_pe.shape[2]
    W = flat.shape[1]
    C = W - R
    V = w_kv.shape[1] - P
    Lmax = cells.shape[1]
    tensors = (flat, cells, lens, q_nope, q_pe, w_kv, ws)
    if not (
        all(t.device.type == "cpu" and t.is_contiguous() for t in tensors)
        and flat.dtype == q_nope.dtype == q_pe.dtype == w_kv.dtype == ws.dtype == torch.float32
        and cells.dtype == lens.dtype == torch.int64
        and q_pe.shape[:2] == (B, H)
        and w_kv.shape[0] == H
        and w_kv.shape[2] == C > 0
        and V > 0
        and lens.shape == (B,)
        and cells.shape[0] == B
        and ws.numel() >= H * Lmax + B * H * (W + C)
    ):
        raise ValueError("mla_decode: unexpected dtypes, shapes or strides")
    # A bad index must raise, as index_select would, not read outside the pool.
    if (
        check
        and B
        and (int(lens.min()) < 1 or int(lens.max()) > Lmax or int(cells.min()) < 0 or int(cells.max()) >= len(flat))
    ):
        raise IndexError("mla_decode: context length or KV cell out of range")
    out = torch.empty(B, H, V, dtype=torch.float32)
    _lib.mla_decode_f32(
        flat.data_ptr(),
        W,
        cells.data_ptr(),
        Lmax,
        lens.data_ptr(),
        q_nope.data_ptr(),
        q_pe.data_ptr(),
        w_kv.data_ptr(),
        B,
        H,
        C,
        P,
        V,
        scale,
        ws.data_ptr(),
        out.data_ptr(),
    )
    return out


def moe_experts(xs: torch.Tensor, counts: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """SiLU-GLU routed experts over expert-sorted rows → ``[N, D]`` (``moe_experts_f32``).

    ``xs`` [N, D] fp32 sorted by expert, ``counts`` [E] int64 rows per expert (summing to N),
    ``w13`` [E, 2I, D] and ``w2`` [E, D, I] fp32. For decode-sized batches (a few tokens per
    expert), where MKL's small products run at a fraction of its peak. Call only when
    ``available()``.
    """
    assert _lib is not None
    N, D = xs.shape
    E, I2, _ = w13.shape
    if not (
        all(t.device.type == "cpu" and t.is_contiguous() for t in (xs, counts, w13, w2))
        and xs.dtype == w13.dtype == w2.dtype == torch.float32
        and counts.dtype == torch.int64
        and counts.shape == (E,)
        and w13.shape[2] == D
        and w2.shape == (E, D, I2 // 2)
        and I2 % 2 == 0
    ):
        raise ValueError("moe_experts: unexpected dtypes, shapes or strides")
    if E and (int(counts.min()) < 0 or int(counts.sum()) != N):
        raise ValueError("moe_experts: counts must be >= 0 and sum to the number of rows")
    ws = torch.empty(max(N, 1) * I2, dtype=torch.float32)
    ys = torch.empty(N, D, dtype=torch.float32)
    _lib.moe_experts_f32(
        xs.data_ptr(), counts.data_ptr(), E, w13.data_ptr(), w2.data_ptr(), D, I2 // 2, ws.data_ptr(), ys.data_ptr()
    )
    return ys


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed blocks of up to 32 MiB for reuse (Linux only).

    Why: by default glibc serves large blocks with mmap and gives them back on free (its dynamic
    threshold adapts, but differently from run to run), so a step's big temporaries (the activations
    of a 2048-token prefill chunk, a few MiB each) can come back as fresh pages every step, and
    page faults cost a prefill step 10-30% (measured on the 2-core box: 440 ms with this, 480-640 ms
    without, 1 against 12-130 thousand minor faults). With the mmap threshold at glibc's maximum and
    the trim threshold at 256 MiB, those blocks stay in the heap and are reused; the price is that
    the process keeps up to that much freed memory. ``TOKENMILL_MALLOPT=0`` leaves malloc alone.
    Returns whether both settings took.
    """
    if os.environ.get("TOKENMILL_MALLOPT", "1") == "0" or platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(_M_TRIM_THRESHOLD, 256 << 20))
