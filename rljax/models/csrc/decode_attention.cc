// One decode step's attention on CPU, reading the sampler's stacked KV cache in place.
//
// XLA:CPU copies every dynamic slice it feeds to a matmul, so a rolled layer scan copies
// layer i's cache window out of the [L, B, K, S, E] stack at every step before attending to
// it. This kernel takes the whole stack and the layer index and reads the window where it
// lies, and takes the window's length at run time (the step's index + 1), so one decode
// program serves every step. Built and loaded by rljax/models/cpu_attention.py.
//
// Operands (float32 unless noted; B rows, H = K * G query heads, E head dim):
//   q        [B, H, E]          the step's queries (query head h = k * G + g)
//   k, v     [L, B, K, S, E]    the rows' own cache (kv-head-major)
//   valid    [B, S] uint8       which of the rows' slots hold real keys
//   layer    s32 scalar         which of the L layers
//   length   s32 scalar         slots read: 0 .. length - 1 (those past it never count)
//   pk, pv   [L, P, K, Sp, E]   (the prefix variant) a shared prompt cache: row b reads
//                               prefix b / (B / P), ahead of its own slots
//   pvalid   [P, Sp] uint8
// Result o [B, H, E]: softmax over the valid slots (prefix, then own) of q.k / sqrt(E),
// times the values. Each row's arithmetic is the same whatever the batch around it (its
// size, the rows next to it, how many rows share its prefix), so a sampler that moves rows
// between batches draws the same samples.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

struct Args {
  const float* q;
  const float* k;  // layer's [B, K, S, E]
  const float* v;
  const uint8_t* valid;
  const float* pk;  // layer's [P, K, Sp, E] or null
  const float* pv;
  const uint8_t* pvalid;
  float* o;
  int64_t B, K, G, S, E, P, Sp, length;
};

inline float dot(const float* a, const float* b, int64_t e) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= e; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < e; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Rows x kv heads [lo, hi): each (b, k) attends its G query heads over its keys.
void run(const Args& a, int64_t lo, int64_t hi) {
  const int64_t G = a.G, E = a.E, sp = a.pk ? a.Sp : 0, n = sp + a.length;
  const float root = std::sqrt(static_cast<float>(E));
  std::vector<float> score(G * n);
  std::vector<const float*> keys(n), vals(n);
  std::vector<char> live(n);
  for (int64_t bk = lo; bk < hi; ++bk) {
    const int64_t b = bk / a.K, kh = bk % a.K;
    if (sp) {
      const int64_t p = b / (a.B / a.P);
      const int64_t base = (p * a.K + kh) * a.Sp * E;
      for (int64_t s = 0; s < sp; ++s) {
        keys[s] = a.pk + base + s * E;
        vals[s] = a.pv + base + s * E;
        live[s] = a.pvalid[p * a.Sp + s] != 0;
      }
    }
    const int64_t own = bk * a.S * E;
    for (int64_t s = 0; s < a.length; ++s) {
      keys[sp + s] = a.k + own + s * E;
      vals[sp + s] = a.v + own + s * E;
      live[sp + s] = a.valid[b * a.S + s] != 0;
    }
    const float* qb = a.q + (b * a.K + kh) * G * E;  // heads kh * G .. kh * G + G - 1
    float* ob = a.o + (b * a.K + kh) * G * E;
    for (int64_t g = 0; g < G; ++g) {
      float* sg = score.data() + g * n;
      float m = -INFINITY;
      for (int64_t s = 0; s < n; ++s) {
        if (!live[s]) continue;
        sg[s] = dot(qb + g * E, keys[s], E) / root;
        m = std::max(m, sg[s]);
      }
      float z = 0.0f;
      for (int64_t s = 0; s < n; ++s) {
        sg[s] = live[s] ? std::exp(sg[s] - m) : 0.0f;
        z += sg[s];
      }
      float* og = ob + g * E;
      std::fill(og, og + E, 0.0f);
      if (z == 0.0f) continue;  // no valid slot: zeros (a row that attends nothing)
      for (int64_t s = 0; s < n; ++s) {
        if (!live[s]) continue;
        const float w = sg[s] / z;
        const float* vs = vals[s];
        for (int64_t e = 0; e < E; ++e) og[e] += w * vs[e];
      }
    }
  }
}

void parallel(const Args& a) {
  const int64_t work = a.B * a.K;
  int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  threads = std::min(threads, work);
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t)
    pool.emplace_back(run, std::cref(a), work * t / threads, work * (t + 1) / threads);
  run(a, 0, work / threads);
  for (auto& th : pool) th.join();
}

ffi::Error Check(ffi::Buffer<ffi::F32>& q, ffi::Buffer<ffi::F32>& k, int64_t layer,
                 int64_t length) {
  auto kd = k.dimensions();
  if (kd.size() != 5 || q.dimensions().size() != 3)
    return ffi::Error::InvalidArgument("decode_attention: q [B, H, E], k / v [L, B, K, S, E]");
  if (layer < 0 || layer >= kd[0])
    return ffi::Error::InvalidArgument("decode_attention: layer index out of range");
  if (length < 0 || length > kd[3])
    return ffi::Error::InvalidArgument("decode_attention: length exceeds the cache slots");
  return ffi::Error::Success();
}

Args Common(ffi::Buffer<ffi::F32>& q, ffi::Buffer<ffi::F32>& k, ffi::Buffer<ffi::F32>& v,
            ffi::Buffer<ffi::U8>& valid, int64_t layer, int64_t length,
            ffi::ResultBuffer<ffi::F32>& o) {
  auto kd = k.dimensions();
  Args a{};
  a.B = kd[1];
  a.K = kd[2];
  a.S = kd[3];
  a.E = kd[4];
  a.G = q.dimensions()[1] / a.K;
  a.length = length;
  const int64_t per_layer = a.B * a.K * a.S * a.E;
  a.q = q.typed_data();
  a.k = k.typed_data() + layer * per_layer;
  a.v = v.typed_data() + layer * per_layer;
  a.valid = valid.typed_data();
  a.o = o->typed_data();
  return a;
}

ffi::Error Own(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
               ffi::Buffer<ffi::U8> valid, ffi::Buffer<ffi::S32> layer,
               ffi::Buffer<ffi::S32> length, ffi::ResultBuffer<ffi::F32> o) {
  const int64_t li = layer.typed_data()[0], n = length.typed_data()[0];
  if (auto err = Check(q, k, li, n); err.failure()) return err;
  Args a = Common(q, k, v, valid, li, n, o);
  parallel(a);
  return ffi::Error::Success();
}

ffi::Error WithPrefix(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                      ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::U8> valid,
                      ffi::Buffer<ffi::S32> layer, ffi::Buffer<ffi::S32> length,
                      ffi::Buffer<ffi::F32> pk, ffi::Buffer<ffi::F32> pv,
                      ffi::Buffer<ffi::U8> pvalid, ffi::ResultBuffer<ffi::F32> o) {
  const int64_t li = layer.typed_data()[0], n = length.typed_data()[0];
  if (auto err = Check(q, k, li, n); err.failure()) return err;
  Args a = Common(q, k, v, valid, li, n, o);
  auto pd = pk.dimensions();
  if (pd.size() != 5 || pd[1] == 0 || a.B % pd[1])
    return ffi::Error::InvalidArgument("decode_attention: prefix [L, P, K, Sp, E], P | B");
  a.P = pd[1];
  a.Sp = pd[3];
  const int64_t per_layer = a.P * a.K * a.Sp * a.E;
  a.pk = pk.typed_data() + li * per_layer;
  a.pv = pv.typed_data() + li * per_layer;
  a.pvalid = pvalid.typed_data();
  parallel(a);
  return ffi::Error::Success();
}

}  // namespace

// q, k, v, valid, layer, length: the operands both handlers take first.
static auto BindCommon() {
  return ffi::Ffi::Bind()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::U8>>()
      .Arg<ffi::Buffer<ffi::S32>>()
      .Arg<ffi::Buffer<ffi::S32>>();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(DecodeAttention, Own,
                              BindCommon().Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(DecodeAttentionPrefix, WithPrefix,
                              BindCommon()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
