// mtp_viz::rows: y = x·Wᵀ (· scale) (+ bias) for the few rows of a decode step or a
// verification (1 to 16), each row of W read once for all rows of x.
//
// A decode step multiplies one row (or, verifying k drafts, k + 1 rows) by every weight
// matrix once, so it is bound by reading the weights: W streams from memory while x stays in
// the registers and L1. Each output is a dot product of one contiguous row of W with a row of
// x, accumulated in float32 lanes (16 on AVX-512, 8 on AVX2) along K, then summed across the
// lanes in one fixed order. Its value depends on nothing but that row of x and that row of W:
// not on how many rows are multiplied together, nor on how the rows of W are split among
// threads. So a verification's logits for a token are bit for bit the plain step's for the
// same prefix, and greedy speculative decoding equals plain greedy decoding on this engine.
//
// Weights: float32; bfloat16 (x bfloat16); int8 with one float32 scale per row of W
// (torchao's weight-only int8: W = q·scale), x float32 or bfloat16, computed in float32.
// ISAs, picked by the caller (`isa`), each compiled here with a target attribute so one build
// serves every x86-64 CPU:
//   4  AMX: bfloat16 weights in tiles of 16 rows × 32 (tdpbf16ps), the rows of x as the
//      other tile, so 16 rows of x cost what one does; other weights as 3
//   3  AVX-512 with BF16: bfloat16 pairs multiplied and summed by vdpbf16ps
//   2  AVX-512F: bfloat16 widened to float32 by a 16-bit shift (exact), then FMA
//   1  AVX2 + FMA: the same on 8 lanes
// int8 weights are widened to float32 (vpmovsxbd, vcvtdq2ps) on every ISA.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace {

constexpr int64_t MAX_ROWS = 16;
constexpr int64_t BLOCK = 32;     // rows of W a thread's task takes at once

enum Kind { F32 = 0, BF16 = 1, I8 = 2 };

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#define AVX2 __attribute__((target("avx2,fma")))
#define AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,fma")))

// ---- widening loads: 16 (AVX-512) or 8 (AVX2) weights as float32
AVX512 inline __m512 wide16(const float* p) { return _mm512_loadu_ps(p); }
AVX512 inline __m512 wide16(const c10::BFloat16* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
AVX512 inline __m512 wide16(const int8_t* p) {
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}
AVX2 inline __m256 wide8(const float* p) { return _mm256_loadu_ps(p); }
AVX2 inline __m256 wide8(const c10::BFloat16* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
AVX2 inline __m256 wide8(const int8_t* p) {
  __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}
AVX2 inline float sum8(__m256 v) {   // one fixed order: halves, then pairs
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The next rows of W, asked for ahead of use: a block of NB rows is NB short streams (E2B's
// rows are 1.5-6 KB), too short for the hardware prefetcher to reach full speed on its own, so
// each line of the block after this one is requested while this one is summed (one request a
// cache line; a prefetch never faults, so past the end of W it is harmless). Into L2, not L1,
// where the next block is several rows: NB rows ahead is 12-100 KB, more than a 32 KB L1
// (Zen 4's) keeps beside the rows being summed, so lines asked into L1 evicted one another
// before use (Zen 4, one row of bfloat16: 14 -> 20 GB/s into L2); one row ahead stays in L1.
template <int NB, typename W>
inline void ahead(const W* p, int64_t k) {
  if ((k * int64_t(sizeof(W))) % 64 == 0)
    _mm_prefetch(reinterpret_cast<const char*>(p + k), NB == 1 ? _MM_HINT_T0 : _MM_HINT_T1);
}

inline float widen(float v) { return v; }
inline float widen(c10::BFloat16 v) { return static_cast<float>(v); }
inline float widen(int8_t v) { return static_cast<float>(v); }

// Each kernel fills out[m * N + n] for n in [n0, n1) with Σ_k xf[m][k]·W[n][k] (float32, x
// already widened to float32: xf), or for the BF16 kernel with x's bfloat16 pairs (xb).
// R rows of x, NB rows of W at a time (more independent chains for one row; the order of
// each output's sum is the same whatever R and NB are).
template <typename W, int R, int NB>
AVX512 void kernel512(const float* xq, int64_t xs, const float* xf, int64_t K, const W* w, int64_t n0, int64_t n1,
                      float* out, int64_t N) {
  const int64_t K16 = K - K % 16;
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) {
    __m512 acc[NB][R];
    for (int b = 0; b < NB; ++b)
      for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
    const float* xk = xq;
    for (int64_t k = 0; k < K16; k += 16, xk += xs) {
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) {
        ahead<NB>(w + (n + NB + b) * K, k);
        __m512 wv = wide16(w + (n + b) * K + k);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[b][r] = _mm512_fmadd_ps(_mm512_load_ps(xk + r * 16), wv, acc[b][r]);
      }
    }
    for (int b = 0; b < NB; ++b)
      for (int r = 0; r < R; ++r) {
        float s = _mm512_reduce_add_ps(acc[b][r]);
        for (int64_t k = K16; k < K; ++k) s += xf[r * K + k] * widen(w[(n + b) * K + k]);
        out[r * N + n + b] = s;
      }
  }
  if (n < n1) kernel512<W, R, 1>(xq, xs, xf, K, w, n, n1, out, N);
}

template <int R, int NB>
AVX512BF16 void kernel512bf16(const c10::BFloat16* xq, int64_t xs, const c10::BFloat16* xb, int64_t K,
                              const c10::BFloat16* w, int64_t n0, int64_t n1, float* out, int64_t N) {
  const int64_t K32 = K - K % 32;
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) {
    __m512 acc[NB][R];
    for (int b = 0; b < NB; ++b)
      for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
    const c10::BFloat16* xk = xq;
    for (int64_t k = 0; k < K32; k += 32, xk += xs) {
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) {
        ahead<NB>(w + (n + NB + b) * K, k);
        ahead<NB>(w + (n + NB + b) * K, k + 16);
        __m512bh wv = (__m512bh)_mm512_loadu_si512(w + (n + b) * K + k);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
          acc[b][r] = _mm512_dpbf16_ps(acc[b][r], (__m512bh)_mm512_load_si512(xk + r * 32), wv);
      }
    }
    for (int b = 0; b < NB; ++b)
      for (int r = 0; r < R; ++r) {
        float s = _mm512_reduce_add_ps(acc[b][r]);
        for (int64_t k = K32; k < K; ++k) s += widen(xb[r * K + k]) * widen(w[(n + b) * K + k]);
        out[r * N + n + b] = s;
      }
  }
  if (n < n1) kernel512bf16<R, 1>(xq, xs, xb, K, w, n, n1, out, N);
}

template <typename W, int R, int NB>
AVX2 void kernel256(const float* xq, int64_t xs, const float* xf, int64_t K, const W* w, int64_t n0, int64_t n1,
                    float* out, int64_t N) {
  const int64_t K8 = K - K % 8;
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) {
    __m256 acc[NB][R];
    for (int b = 0; b < NB; ++b)
      for (int r = 0; r < R; ++r) acc[b][r] = _mm256_setzero_ps();
    const float* xk = xq;
    for (int64_t k = 0; k < K8; k += 8, xk += xs) {
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) {
        ahead<NB>(w + (n + NB + b) * K, k);
        __m256 wv = wide8(w + (n + b) * K + k);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[b][r] = _mm256_fmadd_ps(_mm256_load_ps(xk + r * 8), wv, acc[b][r]);
      }
    }
    for (int b = 0; b < NB; ++b)
      for (int r = 0; r < R; ++r) {
        float s = sum8(acc[b][r]);
        for (int64_t k = K8; k < K; ++k) s += xf[r * K + k] * widen(w[(n + b) * K + k]);
        out[r * N + n + b] = s;
      }
  }
  if (n < n1) kernel256<W, R, 1>(xq, xs, xf, K, w, n, n1, out, N);
}

// ---- AMX: C[16 rows of W][R rows of x] += A[16 rows of W][32 k] · B[16 k-pairs][R pairs of x].
// A tile is 16 rows of W read in place (stride K); B is x packed once per call as pairs:
// xpack[kb][p][r] = (x[r][32kb + 2p], x[r][32kb + 2p + 1]). Each output's sum runs over its own
// pairs in the tile unit's order, whatever R is. Rows of W past the last whole 16 go to the
// vdpbf16ps kernel (the same rows always do, however the work is split).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool amx_permitted() {   // Linux hands out the tile registers' state only on request, once a process
  static const bool ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  return ok;
}

AMX void amx_span(const c10::BFloat16* xpack, int64_t R, int64_t K, const c10::BFloat16* w, int64_t n0, int64_t n1,
                  float* out, int64_t N) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = (t >= 4 && t < 7) ? 64 : R * 4;   // 0-3: C; 4-6: W; 7: x
  }
  _tile_loadconfig(&cfg);
  alignas(64) float c[16 * 16];
  const int64_t kb = K / 32, ldw = K * 2, ldx = R * 4;
  auto put = [&](int64_t n) {
    for (int i = 0; i < 16; ++i)
      for (int64_t r = 0; r < R; ++r) out[r * N + n + i] = c[i * R + r];
  };
  int64_t n = n0;
  for (; n + 64 <= n1; n += 64) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    const c10::BFloat16* a = w + n * K;
    for (int64_t b = 0; b < kb; ++b) {
      _tile_loadd(7, xpack + b * 32 * R, ldx);
      _tile_loadd(4, a + b * 32, ldw);
      _tile_dpbf16ps(0, 4, 7);
      _tile_loadd(5, a + 16 * K + b * 32, ldw);
      _tile_dpbf16ps(1, 5, 7);
      _tile_loadd(6, a + 32 * K + b * 32, ldw);
      _tile_dpbf16ps(2, 6, 7);
      _tile_loadd(4, a + 48 * K + b * 32, ldw);
      _tile_dpbf16ps(3, 4, 7);
    }
    _tile_stored(0, c, ldx); put(n);
    _tile_stored(1, c, ldx); put(n + 16);
    _tile_stored(2, c, ldx); put(n + 32);
    _tile_stored(3, c, ldx); put(n + 48);
  }
  for (; n + 16 <= n1; n += 16) {
    _tile_zero(0);
    for (int64_t b = 0; b < kb; ++b) {
      _tile_loadd(7, xpack + b * 32 * R, ldx);
      _tile_loadd(4, w + n * K + b * 32, ldw);
      _tile_dpbf16ps(0, 4, 7);
    }
    _tile_stored(0, c, ldx); put(n);
  }
  _tile_release();
}

// x's rows as AMX's B tiles (see above): a pair of bfloat16 moved as one 32-bit word
std::vector<c10::BFloat16> pack_pairs(const c10::BFloat16* x, int64_t R, int64_t K) {
  std::vector<c10::BFloat16> p(R * K);
  uint32_t* dst = reinterpret_cast<uint32_t*>(p.data());
  for (int64_t r = 0; r < R; ++r) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(x + r * K);
    for (int64_t j = 0; j < K / 2; ++j) dst[j * R + r] = src[j];   // j = 16·(block of 32) + pair
  }
  return p;
}

// One call of the kernel for R rows: NB chosen so that NB·R accumulators fit the registers
// (32 zmm, 16 ymm) with room for the weights, and give enough independent sums to keep both FMA
// units busy. Each load of x serves NB rows of W, so for several rows of x the loads of x, not
// the weights, bound the pass where NB is small: on AVX-512 NB·R + NB stays within 30 registers
// (Zen 4, one thread, 9 rows of bfloat16 x: 8 -> 17 GB/s with NB 3 instead of 1). xq is x
// packed by lanes (see `pack_lanes`), xs its elements per step of K.
constexpr int nb512(int R) { return R == 1 ? 8 : R <= 3 ? 6 : R <= 5 ? 5 : R <= 6 ? 4 : 3; }
using Span = void (*)(const void* xq, int64_t xs, const void* x, int64_t K, const void* w, int64_t n0, int64_t n1,
                      float* out, int64_t N);

template <typename W, int R>
void span512(const void* xq, int64_t xs, const void* x, int64_t K, const void* w, int64_t n0, int64_t n1,
             float* out, int64_t N) {
  constexpr int NB = nb512(R);
  kernel512<W, R, NB>(static_cast<const float*>(xq), xs, static_cast<const float*>(x), K, static_cast<const W*>(w),
                      n0, n1, out, N);
}
template <int R>
void span512bf16(const void* xq, int64_t xs, const void* x, int64_t K, const void* w, int64_t n0, int64_t n1,
                 float* out, int64_t N) {
  constexpr int NB = nb512(R);
  kernel512bf16<R, NB>(static_cast<const c10::BFloat16*>(xq), xs, static_cast<const c10::BFloat16*>(x), K,
                       static_cast<const c10::BFloat16*>(w), n0, n1, out, N);
}
template <typename W, int R>
void span256(const void* xq, int64_t xs, const void* x, int64_t K, const void* w, int64_t n0, int64_t n1,
             float* out, int64_t N) {
  // int8 widens in two steps (vpmovsxbd, vcvtdq2ps): past 4 rows of x, two rows of W a pass spill
  // AVX2's 16 registers (Zen 4 capped to AVX2, 5 rows of int8: 3.8 -> 5.8 GB/s with one row of W)
  constexpr int NB = R <= 2 ? 3 : R <= (std::is_same_v<W, int8_t> ? 4 : 6) ? 2 : 1;
  kernel256<W, R, NB>(static_cast<const float*>(xq), xs, static_cast<const float*>(x), K, static_cast<const W*>(w),
                      n0, n1, out, N);
}

// The kernel for (isa, weight kind, R), R = 1..PASS; more rows go PASS at a time, which changes
// nothing of any output's value. PASS = 9 covers a verification of up to 8 drafts in one read of W.
constexpr int64_t PASS = 9;
template <template <int> class Table>
Span pick(int64_t r) {
  switch (r) {
    case 1: return Table<1>::f;
    case 2: return Table<2>::f;
    case 3: return Table<3>::f;
    case 4: return Table<4>::f;
    case 5: return Table<5>::f;
    case 6: return Table<6>::f;
    case 7: return Table<7>::f;
    case 8: return Table<8>::f;
    default: return Table<9>::f;
  }
}
template <int R> struct F32x512 { static constexpr Span f = span512<float, R>; };
template <int R> struct BF16x512 { static constexpr Span f = span512<c10::BFloat16, R>; };
template <int R> struct I8x512 { static constexpr Span f = span512<int8_t, R>; };
template <int R> struct BF16dp { static constexpr Span f = span512bf16<R>; };
template <int R> struct F32x256 { static constexpr Span f = span256<float, R>; };
template <int R> struct BF16x256 { static constexpr Span f = span256<c10::BFloat16, R>; };
template <int R> struct I8x256 { static constexpr Span f = span256<int8_t, R>; };

// x's rows interleaved by lanes: xq[(c·M + m)·L + l] = x[m][c·L + l] for whole chunks c of L
// values (the kernel's step of K), so the M rows' values for one step are one contiguous,
// aligned run of cache lines instead of M lines a row's length apart (which can fall into the
// same few sets of L1 and evict each other). The rest of K, past whole chunks, is read from x.
template <typename T>
void pack_lanes(const T* x, int64_t M, int64_t K, int64_t L, T* xq) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < K / L; ++c) std::memcpy(xq + (c * M + m) * L, x + m * K + c * L, L * sizeof(T));
}

Span kernel_for(int64_t isa, Kind kind, int64_t r) {
  if (isa >= 3 && kind == BF16) return pick<BF16dp>(r);
  if (isa >= 2) return kind == F32 ? pick<F32x512>(r) : kind == BF16 ? pick<BF16x512>(r) : pick<I8x512>(r);
  return kind == F32 ? pick<F32x256>(r) : kind == BF16 ? pick<BF16x256>(r) : pick<I8x256>(r);
}

at::Tensor rows(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& scale,
                const std::optional<at::Tensor>& bias, int64_t isa) {
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "mtp_viz::rows runs on the CPU");
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous(), "mtp_viz::rows: W must be a contiguous matrix");
  const int64_t K = w.size(1), N = w.size(0);
  TORCH_CHECK(x.size(-1) == K, "mtp_viz::rows: x and W disagree on K");
  const int64_t M = x.numel() / K;
  TORCH_CHECK(M >= 1 && M <= MAX_ROWS, "mtp_viz::rows takes 1 to 16 rows");
  TORCH_CHECK(isa >= 1 && isa <= 4, "mtp_viz::rows: isa is 1 (AVX2), 2 (AVX-512), 3 (AVX-512 BF16) or 4 (AMX)");
  Kind kind;
  if (w.scalar_type() == at::kFloat) {
    kind = F32;
    TORCH_CHECK(x.scalar_type() == at::kFloat, "mtp_viz::rows: float32 weights take float32 x");
  } else if (w.scalar_type() == at::kBFloat16) {
    kind = BF16;
    TORCH_CHECK(x.scalar_type() == at::kBFloat16, "mtp_viz::rows: bfloat16 weights take bfloat16 x");
  } else {
    TORCH_CHECK(w.scalar_type() == at::kChar && scale.has_value(), "mtp_viz::rows: int8 weights need a scale");
    kind = I8;
  }
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "mtp_viz::rows: x is float32 or bfloat16");

  // x as the kernel reads it: its bfloat16 pairs (vdpbf16ps), else float32 (bfloat16 widens exactly).
  // A decode step calls this ~170 times on a small model, so nothing here allocates or converts
  // what is already as the kernel reads it (a small model's step is these calls' overhead).
  const bool pairs = kind == BF16 && isa >= 3;
  const auto want = pairs ? at::kBFloat16 : at::kFloat;
  const at::Tensor xk = x.scalar_type() == want && x.is_contiguous() ? x : x.to(want).contiguous();
  const char* xp = static_cast<const char*>(xk.data_ptr());
  const int64_t esize = xk.element_size(), xrow = K * esize;
  const void* wp = w.data_ptr();
  // AMX takes bfloat16 weights whose rows are whole tiles (K a multiple of 32), rows of W 16 at a time
  const bool amx = kind == BF16 && isa >= 4 && K % 32 == 0 && amx_permitted();
  const int64_t tiled = amx ? N - N % 16 : 0;
  std::vector<c10::BFloat16> xpack = amx ? pack_pairs(xk.data_ptr<c10::BFloat16>(), M, K) : std::vector<c10::BFloat16>();
  // x packed by lanes for the vector kernels, only where they run (rows of W past AMX's tiles); one
  // row is its own packing, read in place where it is aligned to the kernel's loads
  const int64_t lanes = pairs ? 32 : isa >= 2 ? 16 : 8;   // x's values per step of K in the kernel
  const char* xq = xp;
  if (tiled < N && (M > 1 || reinterpret_cast<uintptr_t>(xp) % 64)) {
    thread_local std::vector<char> xbuf;   // kept between calls, like `acc`
    const size_t need = size_t((K / lanes) * M * lanes * esize + 64);   // +64: to align
    if (xbuf.size() < need) xbuf.resize(need);
    char* q = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(xbuf.data()) + 63) & ~uintptr_t(63));
    if (pairs)
      pack_lanes(xk.data_ptr<c10::BFloat16>(), M, K, lanes, reinterpret_cast<c10::BFloat16*>(q));
    else
      pack_lanes(xk.data_ptr<float>(), M, K, lanes, reinterpret_cast<float*>(q));
    xq = q;
  }
  const auto as_float = [](const std::optional<at::Tensor>& t) {
    return t->scalar_type() == at::kFloat && t->is_contiguous() ? *t : t->to(at::kFloat).contiguous();
  };
  const at::Tensor scale_f = kind == I8 ? as_float(scale) : at::Tensor();
  const at::Tensor bias_f = bias.has_value() ? as_float(bias) : at::Tensor();

  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  at::Tensor y = at::empty(shape, x.options());
  const float* s = kind == I8 ? scale_f.data_ptr<float>() : nullptr;
  const float* bp = bias.has_value() ? bias_f.data_ptr<float>() : nullptr;
  float* yf = y.scalar_type() == at::kFloat ? y.data_ptr<float>() : nullptr;
  c10::BFloat16* yb = yf ? nullptr : y.data_ptr<c10::BFloat16>();
  // the sums go straight into a float32 y with nothing after them, else into `acc` first
  thread_local std::vector<float> acc;   // kept between calls: a 16 MB vector for the vocabulary
  const bool direct = yf && !s && !bp;    // is not allocated per step
  if (!direct && acc.size() < size_t(M * N)) acc.resize(M * N);
  float* out = direct ? yf : acc.data();

  at::parallel_for(0, (N + BLOCK - 1) / BLOCK, 1, [&](int64_t b0, int64_t b1) {
    const int64_t n0 = b0 * BLOCK, n1 = std::min(N, b1 * BLOCK);
    int64_t from = n0;
    if (amx && n0 < tiled) {
      from = std::min(n1, tiled);
      amx_span(xpack.data(), M, K, static_cast<const c10::BFloat16*>(wp), n0, from, out, N);
    }
    for (int64_t r0 = 0; r0 < M && from < n1; r0 += PASS) {
      const int64_t r = std::min<int64_t>(PASS, M - r0);
      kernel_for(isa, kind, r)(xq + r0 * lanes * esize, M * lanes, xp + r0 * xrow, K, wp, from, n1, out + r0 * N, N);
    }
    if (direct) return;
    for (int64_t m = 0; m < M; ++m)   // the scale and the bias after the sum, rounded once to y's type
      for (int64_t n = n0; n < n1; ++n) {
        float v = out[m * N + n];
        if (s) v *= s[n];
        if (bp) v += bp[n];
        if (yf) yf[m * N + n] = v;
        else yb[m * N + n] = c10::BFloat16(v);
      }
  });
  return y;
}

int64_t best_isa() {
  __builtin_cpu_init();
  unsigned a, b, c, d;
  const bool amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1);   // AMX-BF16, AMX-TILE
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return !__builtin_cpu_supports("avx512bf16") ? 2 : amx && amx_permitted() ? 4 : 3;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
}

}  // namespace

TORCH_LIBRARY(mtp_viz, m) {
  m.def("rows(Tensor x, Tensor w, Tensor? scale, Tensor? bias, int isa) -> Tensor");
  m.def("best_isa", &best_isa);
}

TORCH_LIBRARY_IMPL(mtp_viz, CPU, m) { m.impl("rows", rows); }
