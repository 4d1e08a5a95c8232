// Decode-shaped integer linear layers for the CPU: y = x W^T (+ bias) for 1 to ~16 rows of x.
//
// Why a kernel of our own (specdec/model/kernels.py says more): a verifier forward over K+1 rows must
// cost about what a 1-row forward costs. The weights are what a decode step pays for (bytes read
// from memory), so each weight block is loaded once and used for every row of the call, as
// llama.cpp's repacked GEMMs do (ggml-cpu/repack.cpp tiles weight rows x activation rows so that a
// block of weights is read once for all tokens of a batch). The weights' runtime form is plain
// bytes, so the cache stores exactly this form and a start memory-maps it: no repacking.
//
// Arithmetic (the same on every path, so every path gives the same bits):
//   activations: per row, s = max|x| / 127, xq = round_half_even(x * (127 / max|x|)), |xq| <= 127
//   int8 weights (W8A8): wq in [-127, 127] per output channel with scale sw;
//       y = ((float)(sum_k wq * xq) * s) * sw + bias
//   int4 weights: groups of 32 inputs, q in 0..15 with a float16 scale d and minimum m per group
//       (w = d * q + m, GGUF Q4_K's form);
//       acc = 0; for each group g in order: acc = fma((float)(sum q*xq), d, acc);
//                                            acc = fma(m, (float)(sum xq), acc)
//       y = acc * s + bias
// Integer sums are exact whatever the blocking, and every float operation above is done in a
// fixed order per output element, so a row's result never depends on how many rows share the
// call, on the thread split, or on the instruction set: batch invariance by construction.
// Built with -ffp-contract=off so the compiler fuses nothing the formula does not say.
//
// Weight layouts (blocks of 16 output channels; N padded to a multiple of 16 with zero rows):
//   int8: (N/16, K/4, 64) int8; byte c*4+t of block (b, j) is wq[16b + c][4j + t].
//         AVX512-VNNI/AVX-VNNI: vpdpbusd wants unsigned bytes on one side, so each weight
//         vector is flipped to wq + 128 (xor 0x80) and 128 * sum(xq) is subtracted per row.
//         AVX2: sign trick, |wq| * (xq with wq's sign), whose pairwise 16-bit sums cannot
//         saturate (2 * 127 * 127 < 32768).
//   int4: (N/16, K/32, 320) uint8 per block and group: 4 vectors of 64 bytes, byte c*4+t of
//         vector v holding q[16b + c][32g + 8v + t] in its low nibble and q[..][32g + 8v + 4 + t]
//         in its high nibble; then 16 float16 scales d and 16 float16 minimums m.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#define SPECDEC_X86 1
#include <cpuid.h>
#include <immintrin.h>
// Instruction sets per function, as attributes that GCC and clang both accept (clang ignores
// #pragma GCC target, and its intrinsics then refuse to compile: no build on macOS). Every AVX2
// function has the same set, so each can be inlined into the others.
#define TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#endif

namespace {

enum Isa : int64_t { AUTO = 0, SCALAR = 1, AVX2 = 2, AVXVNNI = 3, AVX512VNNI = 4 };
constexpr int BLOCK = 16;         // output channels per weight block
constexpr int GROUP = 32;         // int4 inputs per scale/minimum
constexpr int Q4_BYTES = 320;     // one int4 block-group: 256 bytes of nibbles, 16 d, 16 m (float16)
// Software prefetch of the weights on the x86 paths. With several rows per call the arithmetic per
// byte grows and the hardware prefetcher alone lets memory and arithmetic take turns; prefetching
// ahead of the weight being read keeps the next weights on their way while the current ones are
// multiplied (benchmarks/kernel_candidates.py times this kernel: benchmarks/results/kernel_candidates-*.json).
// How far ahead (bytes; 0: no software prefetch) and with which hint pays best differs by CPU, so
// it is one setting for the process (set_prefetch), which specdec.model.calibration times per
// machine. It changes what is fetched when, never what is computed: results are the same bits
// whatever it is. Until set: 4096 bytes, T0 (specdec.model.native.DEFAULT_PREFETCH; a test checks).
enum Hint : int64_t { T0 = 0, T1 = 1, NTA = 2 };
constexpr int64_t MAX_PREFETCH = 1 << 20;
struct Prefetch {
  int64_t distance;
  int64_t hint;
};
// Two relaxed atomics: a call racing set_prefetch may take the new distance with the old hint, which
// changes nothing but its timing.
std::atomic<int64_t> prefetch_distance{4096}, prefetch_hint{T0};

Prefetch prefetch_setting() {
  return {prefetch_distance.load(std::memory_order_relaxed), prefetch_hint.load(std::memory_order_relaxed)};
}

void set_prefetch(int64_t distance, int64_t hint) {
  TORCH_CHECK(distance >= 0 && distance <= MAX_PREFETCH, "specdec set_prefetch: distance ", distance,
              " bytes is outside 0..", MAX_PREFETCH);
  TORCH_CHECK(hint == T0 || hint == T1 || hint == NTA, "specdec set_prefetch: hint ", hint,
              " is none of 0 (T0), 1 (T1), 2 (NTA)");
  prefetch_distance.store(distance, std::memory_order_relaxed);
  prefetch_hint.store(hint, std::memory_order_relaxed);
}

std::tuple<int64_t, int64_t> prefetch() {
  const Prefetch p = prefetch_setting();
  return {p.distance, p.hint};
}

// What a tile may prefetch: the bytes from its first weight to the end of the layer's weights, and
// the process's setting as it was when its run of blocks began.
struct Stream {
  int64_t size;
  Prefetch ahead;
};

// A path is offered where the CPU has every instruction set its code is compiled for: the vector
// paths all run the AVX2 activation code (quantize), and the 256-bit tiles convert float16 with
// F16C, so each needs AVX2, FMA and F16C. F16C and AVX-VNNI are read from CPUID: not every
// compiler's __builtin_cpu_supports knows their names (it also checks, for avx2 and avx512f, that
// the OS saves the wider registers).
int64_t detect_mask() {
  int64_t mask = 1 << SCALAR;
#ifdef SPECDEC_X86
  __builtin_cpu_init();
  unsigned eax, ebx, ecx, edx;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
  const bool avxvnni = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4));
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) mask |= 1 << AVX2;
  if ((mask & (1 << AVX2)) && avxvnni) mask |= 1 << AVXVNNI;
  if ((mask & (1 << AVX2)) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni"))
    mask |= 1 << AVX512VNNI;
#endif
  return mask;
}

int64_t available_mask() {
  static const int64_t mask = detect_mask();
  return mask;
}

int64_t resolve_isa(int64_t isa) {
  const int64_t mask = available_mask();
  if (isa == AUTO) {
    for (int64_t i : {AVX512VNNI, AVXVNNI, AVX2})
      if (mask & (1 << i)) return i;
    return SCALAR;
  }
  TORCH_CHECK(isa > 0 && isa <= AVX512VNNI && (mask & (1 << isa)), "specdec qlinear: instruction set ", isa,
              " is not available on this CPU (available mask ", mask, ")");
  return isa;
}

// c10's conversion: the bits of F16C's vcvtph2ps (the SIMD paths') for all 65536 inputs, signalling
// NaNs quietened included (checked over every value when it replaced a conversion of our own).
float half_to_float(uint16_t h) { return static_cast<float>(c10::Half(h, c10::Half::from_bits())); }

// ---- activations: one scale per row, int8 values, the sums the kernels need ----------------
//
// A prologue may come first, per row, so that a transformer layer needs no separate calls for
// it: ``gated`` (x is (M, 2K): silu(x[:, :K]) * x[:, K:], the SiLU-gated MLP) and ``norm``
// (rms_norm with that weight: x * (1 / sqrt(mean(x^2) + eps)) * w). The scalar path takes the
// AVX2 code's steps in its order (exp_scalar, the sum of squares in 8 lanes), so every path, and
// every machine, computes the same activations bit for bit.

struct Prologue {
  const float* norm = nullptr;
  float eps = 0.f;
  bool gated = false;
  bool active() const { return norm || gated; }
};

// e^x for one float by exp_avx2's operations in its order (see there): min and max as the vector
// instructions order their operands, fused multiply-adds where it fuses.
float exp_scalar(float x) {
  x = x < 88.37626f ? x : 88.37626f;
  x = x > -88.37626f ? x : -88.37626f;
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(-n, 0.693359375f, x);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.9875691500E-4f;
  p = std::fma(p, r, 1.3981999507E-3f);
  p = std::fma(p, r, 8.3334519073E-3f);
  p = std::fma(p, r, 4.1665795894E-2f);
  p = std::fma(p, r, 1.6666665459E-1f);
  p = std::fma(p, r, 5.0000001201E-1f);
  p = std::fma(p, r * r, r + 1.f);
  const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float e;
  std::memcpy(&e, &bits, 4);
  return p * e;
}

void prologue_scalar(const float* src, int64_t K, const Prologue& p, float* out) {
  for (int64_t k = 0; k < K; ++k) {
    const float v = src[k];
    out[k] = p.gated ? v / (1.f + exp_scalar(0.f - v)) * src[K + k] : v;
  }
  if (!p.norm) return;
  float lane[8] = {0.f};  // prologue_avx2's accumulator, then its horizontal sum (hsum_avx2), then the tail
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int i = 0; i < 8; ++i) lane[i] = std::fma(out[k + i], out[k + i], lane[i]);
  float ss = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  for (; k < K; ++k) ss += out[k] * out[k];
  const float r = 1.f / std::sqrt(ss / (float)K + p.eps);
  for (k = 0; k < K; ++k) out[k] = out[k] * r * p.norm[k];
}

struct Acts {
  int64_t M, Kp, G;
  std::vector<int8_t> q;      // (M, Kp), zero past K
  std::vector<float> scale;   // (M,) max|x| / 127; NaN where the row is not finite
  std::vector<int32_t> comp;  // (M,) 128 * sum(xq): the VNNI paths' correction for wq + 128
  std::vector<float> gsum;    // (M, G) per-group sum(xq), exact as float (|sum| <= 32 * 127)
};

void quantize_row_scalar(const float* x, int64_t K, int8_t* q, float* scale) {
  float amax = 0.f, probe = 0.f;
  for (int64_t k = 0; k < K; ++k) {
    amax = std::max(amax, std::fabs(x[k]));
    probe += x[k] * 0.f;  // NaN if any element is NaN or infinite
  }
  if (!(probe == 0.f)) {
    std::memset(q, 0, K);
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  for (int64_t k = 0; k < K; ++k) {
    float r = std::nearbyint(x[k] * inv);
    q[k] = (int8_t)std::min(127.f, std::max(-127.f, r));
  }
  *scale = amax / 127.f;
}

int32_t group_sum(const int8_t* q) {
  int32_t s = 0;
  for (int t = 0; t < GROUP; ++t) s += q[t];
  return s;
}

#ifdef SPECDEC_X86
// e^x for 8 floats (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-5 polynomial; ~2 ulp).
TARGET_AVX2 __m256 exp_avx2(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.37626f)), _mm256_set1_ps(-88.37626f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

TARGET_AVX2 float hsum_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

TARGET_AVX2 int32_t group_sum_avx2(const int8_t* q) {  // sad of (q + 128) against 0: four 8-byte sums
  const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)q), _mm256_set1_epi8((char)0x80));
  const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - GROUP * 128;
}

TARGET_AVX2 void prologue_avx2(const float* src, int64_t K, const Prologue& p, float* out) {
  const __m256 one = _mm256_set1_ps(1.f);
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 v = _mm256_loadu_ps(src + k);
    if (p.gated) {
      const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), v));
      v = _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)), _mm256_loadu_ps(src + K + k));
    }
    _mm256_storeu_ps(out + k, v);
  }
  if (k < K) {  // the tail through the same vector code, on a padded copy
    alignas(32) float g[8] = {0}, u[8] = {0};
    for (int t = 0; k + t < K; ++t) { g[t] = src[k + t]; u[t] = p.gated ? src[K + k + t] : 0.f; }
    __m256 v = _mm256_load_ps(g);
    if (p.gated) v = _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), v)))),
                                   _mm256_load_ps(u));
    _mm256_store_ps(g, v);
    for (int t = 0; k + t < K; ++t) out[k + t] = g[t];
  }
  if (!p.norm) return;
  __m256 acc = _mm256_setzero_ps();
  for (k = 0; k + 8 <= K; k += 8) {
    const __m256 v = _mm256_loadu_ps(out + k);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  float ss = hsum_avx2(acc);
  for (; k < K; ++k) ss += out[k] * out[k];
  const float r = 1.f / std::sqrt(ss / (float)K + p.eps);
  const __m256 vr = _mm256_set1_ps(r);
  for (k = 0; k + 8 <= K; k += 8)
    _mm256_storeu_ps(out + k, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(out + k), vr), _mm256_loadu_ps(p.norm + k)));
  for (; k < K; ++k) out[k] = out[k] * r * p.norm[k];
}

TARGET_AVX2 void quantize_row_avx2(const float* x, int64_t K, int8_t* q, float* scale) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps(), probe = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 v = _mm256_loadu_ps(x + k);
    vmax = _mm256_max_ps(vmax, _mm256_and_ps(v, absmask));
    probe = _mm256_add_ps(probe, _mm256_mul_ps(v, _mm256_setzero_ps()));
  }
  alignas(32) float m8[8], p8[8];
  _mm256_store_ps(m8, vmax);
  _mm256_store_ps(p8, probe);
  float amax = 0.f, p = 0.f;
  for (int i = 0; i < 8; ++i) { amax = std::max(amax, m8[i]); p += p8[i]; }
  for (; k < K; ++k) { amax = std::max(amax, std::fabs(x[k])); p += x[k] * 0.f; }
  if (!(p == 0.f)) {
    std::memset(q, 0, K);
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  const __m256 vinv = _mm256_set1_ps(inv), hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f);
  k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 r = _mm256_mul_ps(_mm256_loadu_ps(x + k), vinv);
    r = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_round_ps(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    __m256i i = _mm256_cvtps_epi32(r);                                   // exact: already integral
    __m128i s16 = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    __m128i s8 = _mm_packs_epi16(s16, s16);
    _mm_storel_epi64((__m128i*)(q + k), s8);
  }
  for (; k < K; ++k) q[k] = (int8_t)std::min(127.f, std::max(-127.f, std::nearbyint(x[k] * inv)));
  *scale = amax / 127.f;
}
#endif

Acts quantize(const at::Tensor& x, int64_t Kp, int64_t isa, const Prologue& pro) {
  Acts a;
  a.M = x.size(0);
  a.Kp = Kp;
  a.G = Kp / GROUP;
  const int64_t ld = x.size(1), K = pro.gated ? ld / 2 : ld;
  a.q.assign(a.M * Kp, 0);
  a.scale.resize(a.M);
  a.comp.resize(a.M);
  a.gsum.resize(a.M * std::max<int64_t>(a.G, 1));
  const float* xp = x.data_ptr<float>();
  // rows apart on torch's threads: a verification quantises K+1 rows of the widest (gated) input
  at::parallel_for(0, a.M, 1, [&](int64_t m0, int64_t m1) {
    std::vector<float> row(pro.active() ? K : 0);
    for (int64_t m = m0; m < m1; ++m) {
      const float* src = xp + m * ld;
      if (pro.active()) {
#ifdef SPECDEC_X86
        if (isa != SCALAR) prologue_avx2(src, K, pro, row.data());
        else
#endif
          prologue_scalar(src, K, pro, row.data());
        src = row.data();
      }
#ifdef SPECDEC_X86
      if (isa != SCALAR) quantize_row_avx2(src, K, a.q.data() + m * Kp, &a.scale[m]);
      else
#endif
        quantize_row_scalar(src, K, a.q.data() + m * Kp, &a.scale[m]);
      const int8_t* q = a.q.data() + m * Kp;
      int32_t total = 0;
      for (int64_t g = 0; g < a.G; ++g) {
#ifdef SPECDEC_X86
        const int32_t sum = isa != SCALAR ? group_sum_avx2(q + g * GROUP) : group_sum(q + g * GROUP);
#else
        const int32_t sum = group_sum(q + g * GROUP);
#endif
        a.gsum[m * a.G + g] = (float)sum;
        total += sum;
      }
      for (int64_t k = a.G * GROUP; k < Kp; ++k) total += q[k];
      a.comp[m] = 128 * total;
    }
  });
  return a;
}

#ifdef SPECDEC_X86
// Four int8 activations as one 32-bit lane, to broadcast against a weight vector's channels.
inline int32_t quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
#define bcast256(p) _mm256_set1_epi32(quad(p))
#define bcast512(p) _mm512_set1_epi32(quad(p))

// Prefetches ``ahead.distance`` bytes past byte ``at`` of a weight stream that starts at ``base``,
// where that is still inside it: the offset is checked as an integer first, so no pointer past the
// end of the weights is ever formed. _mm_prefetch takes its hint as a constant: one call per hint.
inline void prefetch_ahead(const void* base, int64_t at, const Stream& s) {
  if (s.ahead.distance == 0 || at + s.ahead.distance >= s.size) return;
  const char* p = static_cast<const char*>(base) + at + s.ahead.distance;
  if (s.ahead.hint == NTA) _mm_prefetch(p, _MM_HINT_NTA);
  else if (s.ahead.hint == T1) _mm_prefetch(p, _MM_HINT_T1);
  else _mm_prefetch(p, _MM_HINT_T0);
}
#endif

// Where a block's results go: rows m0.., channels n0..n0+15 of y (M, N), only those < N.
// y = ... + bias + residual: the residual stream of a transformer layer added in the same pass.
struct Out {
  float* y;
  int64_t N;
  const float* bias;      // (N,) or null
  const float* residual;  // (M, N) or null
};

inline void store_row(const Out& o, int64_t m, int64_t n0, const float* vals16) {
  const int64_t n = std::min<int64_t>(BLOCK, o.N - n0);
  float* dst = o.y + m * o.N + n0;
  const float* res = o.residual ? o.residual + m * o.N + n0 : nullptr;
  for (int64_t c = 0; c < n; ++c) {
    float v = o.bias ? vals16[c] + o.bias[n0 + c] : vals16[c];
    dst[c] = res ? v + res[c] : v;
  }
}

// ---- scalar reference paths (any CPU; also what the tests compare the SIMD paths with) ----

void int8_block_scalar(const int8_t* W, int64_t Kq, const Acts& a, int64_t m0, int64_t mr, const float* sw,
                       const Out& o, int64_t n0) {
  for (int64_t r = 0; r < mr; ++r) {
    const int8_t* xq = a.q.data() + (m0 + r) * a.Kp;
    float vals[BLOCK];
    for (int c = 0; c < BLOCK; ++c) {
      int32_t acc = 0;
      for (int64_t j = 0; j < Kq; ++j)
        for (int t = 0; t < 4; ++t) acc += (int32_t)W[j * 64 + c * 4 + t] * xq[j * 4 + t];
      float f = (float)acc;
      f = f * a.scale[m0 + r];
      vals[c] = f * sw[c];
    }
    store_row(o, m0 + r, n0, vals);
  }
}

void int4_block_scalar(const uint8_t* P, int64_t G, const Acts& a, int64_t m0, int64_t mr, const Out& o,
                       int64_t n0) {
  for (int64_t r = 0; r < mr; ++r) {
    const int8_t* xq = a.q.data() + (m0 + r) * a.Kp;
    float vals[BLOCK];
    for (int c = 0; c < BLOCK; ++c) {
      float acc = 0.f;
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t* blk = P + g * Q4_BYTES;
        int32_t s = 0;
        for (int v = 0; v < 4; ++v)
          for (int t = 0; t < 4; ++t) {
            const uint8_t byte = blk[v * 64 + c * 4 + t];
            s += (int32_t)(byte & 0x0f) * xq[g * GROUP + 8 * v + t];
            s += (int32_t)(byte >> 4) * xq[g * GROUP + 8 * v + 4 + t];
          }
        uint16_t dh, mh;
        std::memcpy(&dh, blk + 256 + 2 * c, 2);
        std::memcpy(&mh, blk + 288 + 2 * c, 2);
        acc = std::fma((float)s, half_to_float(dh), acc);
        acc = std::fma(half_to_float(mh), a.gsum[(m0 + r) * a.G + g], acc);
      }
      vals[c] = acc * a.scale[m0 + r];
    }
    store_row(o, m0 + r, n0, vals);
  }
}

#ifdef SPECDEC_X86
// ---- AVX2 (Zen 3 and older Intel), and AVX-VNNI where the CPU has it (256-bit vpdpbusd) ----

// AVX-VNNI's vpdpbusd (unsigned bytes times signed bytes, summed in fours into 32-bit lanes) as
// inline assembly, so that both 256-bit paths are compiled for AVX2 alone: a function that may use
// AVX-VNNI may get its instructions anywhere (clang fuses the AVX2 path's vpmaddwd and add into
// vpdpwssd), and the AVX2 path would then fault on a CPU without them. The encoding is the
// intrinsic's (_mm256_dpbusd_avx_epi32(acc, u8, s8)).
TARGET_AVX2 inline __m256i dpbusd_avxvnni(__m256i acc, __m256i u8, __m256i s8) {
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u8), "x"(s8));
  return acc;
}

// int8: rows m0..m0+MR-1 against one block; two 8-channel halves per 64-byte weight vector.
// ``stream`` (every tile's): what may be prefetched (Stream).
template <int MR, bool VNNI>
TARGET_AVX2 void int8_tile_avx2(const int8_t* W, int64_t Kq, Stream stream, const Acts& a, int64_t m0,
                                const float* sw, const Out& o, int64_t n0) {
  __m256i acc[MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
  const int8_t* x0 = a.q.data() + m0 * a.Kp;
  for (int64_t j = 0; j < Kq; ++j) {
    prefetch_ahead(W, j * 64, stream);
    __m256i w0 = _mm256_loadu_si256((const __m256i*)(W + j * 64));
    __m256i w1 = _mm256_loadu_si256((const __m256i*)(W + j * 64 + 32));
    if (VNNI) {
      w0 = _mm256_xor_si256(w0, flip);
      w1 = _mm256_xor_si256(w1, flip);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const __m256i xb = bcast256(x0 + r * a.Kp + j * 4);
        acc[r][0] = dpbusd_avxvnni(acc[r][0], w0, xb);
        acc[r][1] = dpbusd_avxvnni(acc[r][1], w1, xb);
      }
    } else {
      const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const __m256i xb = bcast256(x0 + r * a.Kp + j * 4);
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(xb, w0)), ones);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(xb, w1)), ones);
        acc[r][0] = _mm256_add_epi32(acc[r][0], p0);
        acc[r][1] = _mm256_add_epi32(acc[r][1], p1);
      }
    }
  }
  const __m256 sw0 = _mm256_loadu_ps(sw), sw1 = _mm256_loadu_ps(sw + 8);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    const __m256i comp = _mm256_set1_epi32(VNNI ? a.comp[m0 + r] : 0);
    const __m256 s = _mm256_set1_ps(a.scale[m0 + r]);
    alignas(32) float vals[BLOCK];
    _mm256_store_ps(vals, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][0], comp)), s), sw0));
    _mm256_store_ps(vals + 8,
                    _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][1], comp)), s), sw1));
    store_row(o, m0 + r, n0, vals);
  }
}

// From this many rows an int4 tile's vpdpbusd sums run as one dependent chain per row and group: the
// rows' chains are independent of each other and hide the instruction's latency (4-5 cycles) together,
// so a second chain per row (and the add that joins the two) is work for nothing. Integer sums: the
// result is bitwise the same either way.
constexpr int ONE_CHAIN_ROWS = 4;

// int4: the nibbles of one group are unpacked once into a small buffer that stays in L1, then
// every row reads them from there.
template <int MR, bool VNNI>
TARGET_AVX2 void int4_tile_avx2(const uint8_t* P, int64_t G, Stream stream, const Acts& a, int64_t m0, const Out& o,
                                int64_t n0) {
  __m256 acc[MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  alignas(32) __m256i q[2][8];  // [half][quad]
  const int8_t* x0 = a.q.data() + m0 * a.Kp;
  for (int64_t g = 0; g < G; ++g) {
    const uint8_t* blk = P + g * Q4_BYTES;
    for (int line = 0; line < Q4_BYTES; line += 64) prefetch_ahead(P, g * Q4_BYTES + line, stream);
    for (int v = 0; v < 4; ++v)
      for (int h = 0; h < 2; ++h) {
        const __m256i raw = _mm256_loadu_si256((const __m256i*)(blk + v * 64 + h * 32));
        q[h][2 * v] = _mm256_and_si256(raw, low);
        q[h][2 * v + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
      }
    __m256 d[2], mn[2];
    for (int h = 0; h < 2; ++h) {
      d[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(blk + 256 + 16 * h)));
      mn[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(blk + 288 + 16 * h)));
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const int8_t* xr = x0 + r * a.Kp + g * GROUP;
      const __m256 gs = _mm256_set1_ps(a.gsum[(m0 + r) * a.G + g]);
      for (int h = 0; h < 2; ++h) {
        __m256i s;
        if (VNNI && MR >= ONE_CHAIN_ROWS) {  // the rows' chains are independent: one per row hides the latency
          s = _mm256_setzero_si256();
          for (int t = 0; t < 8; ++t) s = dpbusd_avxvnni(s, q[h][t], bcast256(xr + 4 * t));
        } else if (VNNI) {  // few rows: two chains per row hide vpdpbusd's latency
          __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
          for (int t = 0; t < 8; t += 2) {
            s0 = dpbusd_avxvnni(s0, q[h][t], bcast256(xr + 4 * t));
            s1 = dpbusd_avxvnni(s1, q[h][t + 1], bcast256(xr + 4 * t + 4));
          }
          s = _mm256_add_epi32(s0, s1);
        } else {  // 16-bit sums of 16 products each: at most 16 * 15 * 127 < 32768, no saturation
          __m256i s16 = _mm256_maddubs_epi16(q[h][0], bcast256(xr));
          for (int t = 1; t < 8; ++t) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[h][t], bcast256(xr + 4 * t)));
          s = _mm256_madd_epi16(s16, ones);
        }
        acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d[h], acc[r][h]);
        acc[r][h] = _mm256_fmadd_ps(mn[h], gs, acc[r][h]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    const __m256 s = _mm256_set1_ps(a.scale[m0 + r]);
    alignas(32) float vals[BLOCK];
    _mm256_store_ps(vals, _mm256_mul_ps(acc[r][0], s));
    _mm256_store_ps(vals + 8, _mm256_mul_ps(acc[r][1], s));
    store_row(o, m0 + r, n0, vals);
  }
}

// ---- AVX512-VNNI (Zen 4, Zen 5, Xeons since Cascade Lake) ----

TARGET_AVX512 inline void store_block_512(const Out& o, int64_t m, int64_t n0, __m512 v) {
  const int64_t n = std::min<int64_t>(BLOCK, o.N - n0);
  const __mmask16 k = n >= BLOCK ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
  if (o.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, o.bias + n0));
  if (o.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, o.residual + m * o.N + n0));
  _mm512_mask_storeu_ps(o.y + m * o.N + n0, k, v);
}

// U independent accumulators per row when rows are few, so that vpdpbusd's latency is hidden.
template <int MR>
TARGET_AVX512 void int8_tile_512(const int8_t* W, int64_t Kq, Stream stream, const Acts& a, int64_t m0,
                                 const float* sw, const Out& o, int64_t n0) {
  constexpr int U = MR == 1 ? 4 : MR == 2 ? 2 : 1;
  __m512i acc[MR][U];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
    for (int u = 0; u < U; ++u) acc[r][u] = _mm512_setzero_si512();
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const int8_t* x0 = a.q.data() + m0 * a.Kp;
  int64_t j = 0;
  for (; j + U <= Kq; j += U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      prefetch_ahead(W, (j + u) * 64, stream);
      const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(W + (j + u) * 64), flip);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r)
        acc[r][u] = _mm512_dpbusd_epi32(acc[r][u], w, bcast512(x0 + r * a.Kp + (j + u) * 4));
    }
  }
  for (; j < Kq; ++j) {
    const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(W + j * 64), flip);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], w, bcast512(x0 + r * a.Kp + j * 4));
  }
  const __m512 s_w = _mm512_loadu_ps(sw);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    __m512i t = acc[r][0];
    for (int u = 1; u < U; ++u) t = _mm512_add_epi32(t, acc[r][u]);
    t = _mm512_sub_epi32(t, _mm512_set1_epi32(a.comp[m0 + r]));
    const __m512 f = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(a.scale[m0 + r])), s_w);
    store_block_512(o, m0 + r, n0, f);
  }
}

template <int MR>
TARGET_AVX512 void int4_tile_512(const uint8_t* P, int64_t G, Stream stream, const Acts& a, int64_t m0, const Out& o,
                                 int64_t n0) {
  __m512 acc[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0f);
  const int8_t* x0 = a.q.data() + m0 * a.Kp;
  for (int64_t g = 0; g < G; ++g) {
    const uint8_t* blk = P + g * Q4_BYTES;
    for (int line = 0; line < Q4_BYTES; line += 64) prefetch_ahead(P, g * Q4_BYTES + line, stream);
    __m512i q[8];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i raw = _mm512_loadu_si512(blk + v * 64);
      q[2 * v] = _mm512_and_si512(raw, low);
      q[2 * v + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(blk + 256)));
    const __m512 mn = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(blk + 288)));
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const int8_t* xr = x0 + r * a.Kp + g * GROUP;
      __m512i s;
      if constexpr (MR >= ONE_CHAIN_ROWS) {  // the rows' chains are independent: one per row hides the latency
        s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], bcast512(xr));
#pragma GCC unroll 8
        for (int t = 1; t < 8; ++t) s = _mm512_dpbusd_epi32(s, q[t], bcast512(xr + 4 * t));
      } else {  // few rows: two chains per row hide vpdpbusd's latency
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], bcast512(xr));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[1], bcast512(xr + 4));
#pragma GCC unroll 8
        for (int t = 2; t < 8; t += 2) {
          s0 = _mm512_dpbusd_epi32(s0, q[t], bcast512(xr + 4 * t));
          s1 = _mm512_dpbusd_epi32(s1, q[t + 1], bcast512(xr + 4 * t + 4));
        }
        s = _mm512_add_epi32(s0, s1);
      }
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[r]);
      acc[r] = _mm512_fmadd_ps(mn, _mm512_set1_ps(a.gsum[(m0 + r) * a.G + g]), acc[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) store_block_512(o, m0 + r, n0, _mm512_mul_ps(acc[r], _mm512_set1_ps(a.scale[m0 + r])));
}

// Row tiles by count: a compile-time R lets every accumulator live in a register.
template <int R, int MAXR, class F>
void by_rows(int64_t mr, F&& f) {
  if constexpr (R <= MAXR) {
    if (mr == R) return f(std::integral_constant<int, R>{});
    by_rows<R + 1, MAXR>(mr, f);
  }
}
#endif  // SPECDEC_X86

// The most rows one pass over a block carries (accumulators in registers: 32 zmm, 16 ymm).
int max_rows(int64_t isa) { return isa == AVX2 || isa == AVXVNNI ? 4 : 16; }

// Blocks b0..b1 of nb.
void int8_blocks(const int8_t* W, const float* scales, int64_t nb, int64_t Kq, const Acts& a, const Out& o, int64_t isa,
                 int64_t b0, int64_t b1) {
  const int64_t step = max_rows(isa);
  [[maybe_unused]] const Prefetch ahead = prefetch_setting();
  for (int64_t b = b0; b < b1; ++b) {
    const int8_t* Wb = W + b * Kq * 64;
    [[maybe_unused]] const Stream stream{(nb - b) * Kq * 64, ahead};
    const float* sw = scales + b * BLOCK;
    for (int64_t m0 = 0; m0 < a.M; m0 += step) {
      const int64_t mr = std::min<int64_t>(step, a.M - m0);
#ifdef SPECDEC_X86
      if (isa == AVX512VNNI) {
        by_rows<1, 16>(mr,
                       [&](auto r) { int8_tile_512<decltype(r)::value>(Wb, Kq, stream, a, m0, sw, o, b * BLOCK); });
        continue;
      }
      if (isa == AVXVNNI) {
        by_rows<1, 4>(mr, [&](auto r) {
          int8_tile_avx2<decltype(r)::value, true>(Wb, Kq, stream, a, m0, sw, o, b * BLOCK);
        });
        continue;
      }
      if (isa == AVX2) {
        by_rows<1, 4>(mr, [&](auto r) {
          int8_tile_avx2<decltype(r)::value, false>(Wb, Kq, stream, a, m0, sw, o, b * BLOCK);
        });
        continue;
      }
#endif
      int8_block_scalar(Wb, Kq, a, m0, mr, sw, o, b * BLOCK);
    }
  }
}

void int4_blocks(const uint8_t* P, int64_t nb, int64_t G, const Acts& a, const Out& o, int64_t isa, int64_t b0,
                 int64_t b1) {
  const int64_t step = max_rows(isa);
  [[maybe_unused]] const Prefetch ahead = prefetch_setting();
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* Pb = P + b * G * Q4_BYTES;
    [[maybe_unused]] const Stream stream{(nb - b) * G * Q4_BYTES, ahead};
    for (int64_t m0 = 0; m0 < a.M; m0 += step) {
      const int64_t mr = std::min<int64_t>(step, a.M - m0);
#ifdef SPECDEC_X86
      if (isa == AVX512VNNI) {
        by_rows<1, 16>(mr, [&](auto r) { int4_tile_512<decltype(r)::value>(Pb, G, stream, a, m0, o, b * BLOCK); });
        continue;
      }
      if (isa == AVXVNNI) {
        by_rows<1, 4>(mr,
                      [&](auto r) { int4_tile_avx2<decltype(r)::value, true>(Pb, G, stream, a, m0, o, b * BLOCK); });
        continue;
      }
      if (isa == AVX2) {
        by_rows<1, 4>(mr,
                      [&](auto r) { int4_tile_avx2<decltype(r)::value, false>(Pb, G, stream, a, m0, o, b * BLOCK); });
        continue;
      }
#endif
      int4_block_scalar(Pb, G, a, m0, mr, o, b * BLOCK);
    }
  }
}

// Output channels in contiguous runs of blocks handed out to torch's threads as each finishes
// its last: on a shared VM one core is often slower than the other for a while, and an even
// split waits for the slower one.
// Each run is a contiguous stream of weights; the result does not depend on who computes what.
template <class F>
void for_blocks(int64_t nb, F&& f) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), nb));
  const int64_t run = std::max<int64_t>(1, nb / (threads * 8));
  std::atomic<int64_t> next{0};
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t b0; (b0 = next.fetch_add(run)) < nb;) f(b0, std::min(nb, b0 + run));
  });
}

// What both linear ops take besides their weights: x (M, K) or (M, 2K) with ``gated``, an
// optional rms_norm weight (K,), bias (N,) and residual (M, N); checked once here.
struct Call {
  Prologue pro;
  const float* bias = nullptr;
  const float* residual = nullptr;
  int64_t K = 0;
};

// The weights hold Kp inputs: x's K padded with zeros to a multiple of ``pad`` (int8: 4; int4: 1,
// its K being whole groups of 32).
Call check_call(const at::Tensor& x, int64_t Kp, int64_t pad, int64_t N, const c10::optional<at::Tensor>& bias,
                const c10::optional<at::Tensor>& norm, double eps, bool gated,
                const c10::optional<at::Tensor>& residual) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.dim() == 2 && x.is_contiguous(),
              "specdec linear: x must be a contiguous (rows, in) float32 CPU tensor");
  TORCH_CHECK(!gated || x.size(1) % 2 == 0, "specdec linear: a gated x has an even number of columns");
  Call c;
  c.K = gated ? x.size(1) / 2 : x.size(1);
  TORCH_CHECK(c.K > 0 && (c.K + pad - 1) / pad * pad == Kp, "specdec linear: x has ", c.K, " inputs, the weights ", Kp,
              pad > 1 ? " (inputs padded to a multiple of " + std::to_string(pad) + ")" : std::string());
  auto vec = [](const c10::optional<at::Tensor>& t, int64_t n, const char* what) -> const float* {
    if (!t.has_value() || !t->defined()) return nullptr;
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->numel() == n && t->is_contiguous(), "specdec linear: ", what,
                " must be a contiguous float32 tensor of ", n, " elements");
    return t->data_ptr<float>();
  };
  c.bias = vec(bias, N, "bias");
  c.pro.norm = vec(norm, c.K, "the norm weight");
  c.pro.eps = (float)eps;
  c.pro.gated = gated;
  c.residual = vec(residual, x.size(0) * N, "the residual");
  return c;
}

// The steps both linear ops share around their blocks: checks, activations, output, threads.
template <class Blocks>
at::Tensor run_linear(const at::Tensor& x, int64_t nb, int64_t Kp, int64_t pad, int64_t N,
                      const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& norm, double eps,
                      bool gated, const c10::optional<at::Tensor>& residual, int64_t isa, Blocks&& blocks) {
  TORCH_CHECK(N > nb * BLOCK - BLOCK && N <= nb * BLOCK, "specdec linear: ", N, " outputs for ", nb, " blocks");
  const Call c = check_call(x, Kp, pad, N, bias, norm, eps, gated, residual);
  isa = resolve_isa(isa);
  const Acts a = quantize(x, Kp, isa, c.pro);
  at::Tensor y = at::empty({x.size(0), N}, x.options());
  const Out o{y.data_ptr<float>(), N, c.bias, c.residual};
  for_blocks(nb, [&](int64_t b0, int64_t b1) { blocks(a, o, isa, b0, b1); });
  return y;
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scales,
                       const c10::optional<at::Tensor>& bias, int64_t out_features, int64_t isa,
                       const c10::optional<at::Tensor>& norm, double eps, bool gated,
                       const c10::optional<at::Tensor>& residual) {
  TORCH_CHECK(w.scalar_type() == at::kChar && w.dim() == 3 && w.size(2) == 64 && w.is_contiguous(),
              "specdec int8_linear: weights must be (N/16, K/4, 64) int8");
  const int64_t nb = w.size(0), Kq = w.size(1);
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == nb * BLOCK && scales.is_contiguous(),
              "specdec int8_linear: scales must be (N/16*16,) float32");
  const int8_t* W = w.data_ptr<int8_t>();
  const float* sw = scales.data_ptr<float>();
  return run_linear(x, nb, Kq * 4, 4, out_features, bias, norm, eps, gated, residual, isa,
                    [&](const Acts& a, const Out& o, int64_t isa, int64_t b0, int64_t b1) {
                      int8_blocks(W, sw, nb, Kq, a, o, isa, b0, b1);
                    });
}

at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                       int64_t out_features, int64_t isa, const c10::optional<at::Tensor>& norm, double eps,
                       bool gated, const c10::optional<at::Tensor>& residual) {
  TORCH_CHECK(w.scalar_type() == at::kByte && w.dim() == 3 && w.size(2) == Q4_BYTES && w.is_contiguous(),
              "specdec int4_linear: weights must be (N/16, K/32, 320) uint8");
  const int64_t nb = w.size(0), G = w.size(1);
  const uint8_t* P = w.data_ptr<uint8_t>();
  return run_linear(x, nb, G * GROUP, 1, out_features, bias, norm, eps, gated, residual, isa,
                    [&](const Acts& a, const Out& o, int64_t isa, int64_t b0, int64_t b1) {
                      int4_blocks(P, nb, G, a, o, isa, b0, b1);
                    });
}

// ---- attention for decode-shaped forwards, one call per layer --------------------------------
//
// Row t of q (T rows, H heads) attends to the first lengths[t] entries of its key/value head's
// cache (or, with ``index``, to the cache entries index[t, :lengths[t]]: a token tree's rows).
// Each (row, head) is computed by the same code in the same order whatever T is, so a row's
// output is bitwise what a one-row call gives: the batch invariance torch's fused attention
// lacks (it blocks rows together), without a call per row. softmax(q.k / sqrt(D)) v in float32.

float dot_scalar(const float* a, const float* b, int64_t D) {
  float s = 0.f;
  for (int64_t d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

void attend_row_scalar(const float* q, const float* K, const float* V, int64_t D, int64_t n, const int64_t* idx,
                       float scale, float* scores, float* out) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t key = idx ? idx[j] : j;
    scores[j] = dot_scalar(q, K + key * D, D) * scale;
    mx = std::max(mx, scores[j]);
  }
  float sum = 0.f;
  for (int64_t j = 0; j < n; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
  for (int64_t d = 0; d < D; ++d) out[d] = 0.f;
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = V + (idx ? idx[j] : j) * D;
    for (int64_t d = 0; d < D; ++d) out[d] += scores[j] * vj[d];
  }
  const float inv = 1.f / sum;
  for (int64_t d = 0; d < D; ++d) out[d] *= inv;
}

#ifdef SPECDEC_X86
// D (a multiple of 8, at most 256) as a template argument: the row's output accumulates in registers.
template <int D>
TARGET_AVX2 void attend_row_avx2(const float* q, const float* K, const float* V, int64_t n, const int64_t* idx,
                                 float scale, float* scores, float* out) {
  constexpr int C = D / 8;
  __m256 qv[C];
  for (int c = 0; c < C; ++c) qv[c] = _mm256_loadu_ps(q + 8 * c);
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = K + (idx ? idx[j] : j) * D;
    __m256 a0 = _mm256_mul_ps(qv[0], _mm256_loadu_ps(kj)), a1 = _mm256_setzero_ps();
    for (int c = 1; c < C; c += 2) {
      a1 = _mm256_fmadd_ps(qv[c], _mm256_loadu_ps(kj + 8 * c), a1);
      if (c + 1 < C) a0 = _mm256_fmadd_ps(qv[c + 1], _mm256_loadu_ps(kj + 8 * c + 8), a0);
    }
    scores[j] = hsum_avx2(_mm256_add_ps(a0, a1)) * scale;
    mx = std::max(mx, scores[j]);
  }
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vmx));
    _mm256_storeu_ps(scores + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  if (j < n) {  // the tail through the same exp; the lanes past n are left out of the sum
    alignas(32) float tail[8];
    for (int t = 0; t < 8; ++t) tail[t] = j + t < n ? scores[j + t] - mx : 0.f;
    const __m256 live = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    const __m256 e = _mm256_and_ps(exp_avx2(_mm256_load_ps(tail)), live);
    _mm256_store_ps(tail, e);
    for (int64_t t = 0; j + t < n; ++t) scores[j + t] = tail[t];
    vsum = _mm256_add_ps(vsum, e);
  }
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t jj = 0; jj < n; ++jj) {
    const float* vj = V + (idx ? idx[jj] : jj) * D;
    const __m256 p = _mm256_set1_ps(scores[jj]);
    for (int c = 0; c < C; ++c) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
  }
  const __m256 inv = _mm256_set1_ps(1.f / hsum_avx2(vsum));
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, _mm256_mul_ps(acc[c], inv));
}
#endif

// Whether rows of head size D take the vector path here: AVX2, and the head sizes of the models we
// run (Qwen2.5 0.5B: 64, 1.5B: 128). Elsewhere (aarch64, other head sizes) the loop is scalar and
// torch's attention is the faster choice: specdec.model.native asks this before using the op.
bool attention_simd(int64_t D) {
#ifdef SPECDEC_X86
  return (available_mask() & (1 << AVX2)) && (D == 64 || D == 128);
#else
  return false;
#endif
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lengths,
                     const c10::optional<at::Tensor>& index) {
  TORCH_CHECK(q.device().is_cpu() && q.scalar_type() == at::kFloat && q.dim() == 3 && q.is_contiguous(),
              "specdec attention: q must be a contiguous (T, H, D) float32 CPU tensor");
  TORCH_CHECK(k.scalar_type() == at::kFloat && k.dim() == 3 && k.stride(2) == 1 && k.stride(1) == k.size(2) &&
                  v.sizes() == k.sizes() && v.strides() == k.strides() && k.size(2) == q.size(2),
              "specdec attention: k and v must be (G, capacity, D) float32 with rows contiguous");
  const int64_t T = q.size(0), H = q.size(1), D = q.size(2), G = k.size(0), C = k.size(1);
  TORCH_CHECK(H % G == 0, "specdec attention: heads ", H, " not a multiple of key/value heads ", G);
  TORCH_CHECK(lengths.scalar_type() == at::kLong && lengths.numel() == T && lengths.is_contiguous(),
              "specdec attention: lengths must be (T,) int64");
  const int64_t* len = lengths.data_ptr<int64_t>();
  const int64_t* idx = nullptr;
  int64_t ld_idx = 0;
  if (index.has_value() && index->defined()) {
    TORCH_CHECK(index->scalar_type() == at::kLong && index->dim() == 2 && index->size(0) == T && index->is_contiguous(),
                "specdec attention: index must be (T, n) int64");
    idx = index->data_ptr<int64_t>();
    ld_idx = index->size(1);
  }
  int64_t longest = 0;
  for (int64_t t = 0; t < T; ++t) {
    TORCH_CHECK(len[t] > 0 && len[t] <= (idx ? ld_idx : C), "specdec attention: row ", t, " sees ", len[t], " keys");
    longest = std::max(longest, len[t]);
  }
  if (idx)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < len[t]; ++j)
        TORCH_CHECK(idx[t * ld_idx + j] >= 0 && idx[t * ld_idx + j] < C, "specdec attention: index out of range");
  at::Tensor out = at::empty({T, H * D}, q.options());
  const float scale = 1.f / std::sqrt((float)D);
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t ks = k.stride(0), per_kv = H / G;
  [[maybe_unused]] const bool simd = attention_simd(D);
  at::parallel_for(0, T * H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores(longest);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / H, h = i % H, g = h / per_kv;
      const float *qi = qp + (t * H + h) * D, *K = kp + g * ks, *V = vp + g * ks;
      const int64_t* row_idx = idx ? idx + t * ld_idx : nullptr;
#ifdef SPECDEC_X86
      if (simd) {
        (D == 64 ? attend_row_avx2<64> : attend_row_avx2<128>)(qi, K, V, len[t], row_idx, scale, scores.data(),
                                                                op + (t * H + h) * D);
        continue;
      }
#endif
      attend_row_scalar(qi, K, V, D, len[t], row_idx, scale, scores.data(), op + (t * H + h) * D);
    }
  });
  return out;
}

// ---- one decoder layer in one call ------------------------------------------------------------
//
// A Qwen2 layer as the lean forward runs it (specdec/model/qwen2.py), for rows that attend by
// ``lengths``/``index`` as above: qkv = rms_norm(x) Wqkv^T + b; q and k rotated pairwise (their
// rows were reordered at load so that each rotated pair sits side by side: (a, b) -> (a cos - b sin,
// a sin + b cos)); k and v written at cache slots L..L+T-1; attention; x += att Wo^T;
// x += (silu(gate) * up)(rms_norm(x)) Wdown^T. The same steps in the same order as the op-by-op
// path, each row on its own: batch-invariant as every piece is. What it saves is what surrounds
// the kernels: ~20 torch ops a layer from Python, most of a small draft's one-row forward beyond
// its weights' read time. A linear's weights are int8 blocks with their scales, or int4 blocks
// (scales absent).

at::Tensor layer_linear(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& scales,
                        const c10::optional<at::Tensor>& bias, int64_t n, int64_t isa,
                        const c10::optional<at::Tensor>& norm, double eps, bool gated,
                        const c10::optional<at::Tensor>& residual) {
  if (scales.has_value() && scales->defined())
    return int8_linear(x, w, *scales, bias, n, isa, norm, eps, gated, residual);
  return int4_linear(x, w, bias, n, isa, norm, eps, gated, residual);
}

at::Tensor decoder_layer(const at::Tensor& x, const at::Tensor& rot, const at::Tensor& k_cache,
                         const at::Tensor& v_cache, int64_t L, const at::Tensor& lengths,
                         const c10::optional<at::Tensor>& index, const at::Tensor& attn_norm,
                         const at::Tensor& mlp_norm, double eps, int64_t heads, int64_t isa,
                         c10::IntArrayRef outs, const at::Tensor& qkv_w, const c10::optional<at::Tensor>& qkv_s,
                         const c10::optional<at::Tensor>& qkv_b, const at::Tensor& o_w,
                         const c10::optional<at::Tensor>& o_s, const at::Tensor& gu_w,
                         const c10::optional<at::Tensor>& gu_s, const at::Tensor& down_w,
                         const c10::optional<at::Tensor>& down_s) {
  const int64_t T = x.size(0), E = x.size(1), G = k_cache.size(0), C = k_cache.size(1), D = k_cache.size(2);
  const int64_t H = heads;
  TORCH_CHECK(outs.size() == 4, "specdec decoder_layer: out_features are the four linears' (qkv, o, gate_up, down)");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && v_cache.sizes() == k_cache.sizes() &&
                  k_cache.scalar_type() == at::kFloat && v_cache.scalar_type() == at::kFloat,
              "specdec decoder_layer: the caches must be contiguous (G, capacity, D) float32");
  TORCH_CHECK(L >= 0 && L + T <= C, "specdec decoder_layer: slots ", L, "..", L + T, " beyond the cache's ", C);
  TORCH_CHECK(rot.scalar_type() == at::kFloat && rot.is_contiguous() && rot.dim() == 3 && rot.size(0) == T &&
                  rot.size(1) * 2 == D && rot.size(2) == 2,
              "specdec decoder_layer: rot must be (T, D/2, 2) float32 (cos, sin)");
  TORCH_CHECK(H % G == 0 && H * D == E, "specdec decoder_layer: ", H, " heads of ", D, " for a hidden size of ", E);
  const int64_t width = (H + 2 * G) * D;
  TORCH_CHECK(outs[0] == width && outs[1] == E && outs[3] == E && outs[2] % 2 == 0,
              "specdec decoder_layer: the linears' shapes do not make a layer");
  at::Tensor qkv = layer_linear(x, qkv_w, qkv_s, qkv_b, width, isa, attn_norm, eps, false, c10::nullopt);
  at::Tensor q = at::empty({T, H, D}, x.options());
  float *qkvp = qkv.data_ptr<float>(), *qp = q.data_ptr<float>();
  float *kc = k_cache.data_ptr<float>(), *vc = v_cache.data_ptr<float>();
  const float* rp = rot.data_ptr<float>();
  for (int64_t t = 0; t < T; ++t) {
    const float* row = qkvp + t * width;
    const float* r = rp + t * D;
    for (int64_t h = 0; h < H + G; ++h) {
      const float* src = row + h * D;
      float* dst = h < H ? qp + (t * H + h) * D : kc + ((h - H) * C + L + t) * D;
      for (int64_t j = 0; j < D / 2; ++j) {
        const float a = src[2 * j], b = src[2 * j + 1], c = r[2 * j], sn = r[2 * j + 1];
        dst[2 * j] = a * c - b * sn;
        dst[2 * j + 1] = a * sn + b * c;
      }
    }
    for (int64_t g = 0; g < G; ++g)
      std::memcpy(vc + (g * C + L + t) * D, row + (H + G + g) * D, D * sizeof(float));
  }
  at::Tensor att = attention(q, k_cache, v_cache, lengths, index);                  // (T, H*D)
  at::Tensor h1 = layer_linear(att, o_w, o_s, c10::nullopt, E, isa, c10::nullopt, 0., false, x);
  at::Tensor gu = layer_linear(h1, gu_w, gu_s, c10::nullopt, outs[2], isa, mlp_norm, eps, false, c10::nullopt);
  return layer_linear(gu, down_w, down_s, c10::nullopt, E, isa, c10::nullopt, 0., true, h1);
}

int64_t isas() { return available_mask(); }

}  // namespace

TORCH_LIBRARY(specdec, m) {
  m.def("int8_linear(Tensor x, Tensor w, Tensor scales, Tensor? bias, int out_features, int isa, Tensor? norm=None, "
        "float eps=0., bool gated=False, Tensor? residual=None) -> Tensor");
  m.def("int4_linear(Tensor x, Tensor w, Tensor? bias, int out_features, int isa, Tensor? norm=None, float eps=0., "
        "bool gated=False, Tensor? residual=None) -> Tensor");
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor lengths, Tensor? index) -> Tensor");
  m.def("decoder_layer(Tensor x, Tensor rot, Tensor(a!) k_cache, Tensor(b!) v_cache, int L, Tensor lengths, "
        "Tensor? index, Tensor attn_norm, Tensor mlp_norm, float eps, int heads, int isa, int[] outs, Tensor qkv_w, Tensor? qkv_s, "
        "Tensor? qkv_b, Tensor o_w, Tensor? o_s, Tensor gu_w, Tensor? gu_s, Tensor down_w, Tensor? down_s) -> Tensor");
  m.def("isas() -> int", &isas);
  m.def("set_prefetch(int distance, int hint) -> ()", &set_prefetch);
  m.def("prefetch() -> (int, int)", &prefetch);
  m.def("attention_simd(int head_dim) -> bool", &attention_simd);
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) {
  m.impl("int8_linear", &int8_linear);
  m.impl("int4_linear", &int4_linear);
  m.impl("attention", &attention);
  m.impl("decoder_layer", &decoder_layer);
}
