#pragma once
// The naive reference the attention tests compare with: the whole masked score matrix in float64, a
// softmax per row, then P V. Modifier and mask are plain C++ functions of (score, b, h, q, kv) / (b, h, q, kv).
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include <kiln/kiln.hpp>

namespace kiln_test {

using ScoreFn = std::function<double(double, int64_t, int64_t, int64_t, int64_t)>;
using MaskFn = std::function<bool(int64_t, int64_t, int64_t, int64_t)>;

inline double identity_score(double s, int64_t, int64_t, int64_t, int64_t) { return s; }
inline bool no_mask(int64_t, int64_t, int64_t, int64_t) { return true; }

struct Reference {
  std::vector<double> out;  // [B, Hq, Lq, Dv]
  std::vector<double> lse;  // [B, Hq, Lq]
};

// q [B, Hq, Lq, D], k [B, Hkv, Lkv, D], v [B, Hkv, Lkv, Dv], any floating dtype (read as double).
template <class T>
Reference naive_attention(const kiln::Tensor<T>& q, const kiln::Tensor<T>& k, const kiln::Tensor<T>& v,
                          const ScoreFn& score_mod, const MaskFn& mask, double scale) {
  const auto Q = q.template to<double>().contiguous().to_vector(), K = k.template to<double>().contiguous().to_vector(),
             V = v.template to<double>().contiguous().to_vector();
  const int64_t B = q.size(0), Hq = q.size(1), Lq = q.size(2), D = q.size(3), Hkv = k.size(1), Lkv = k.size(2),
                Dv = v.size(3);
  Reference r{std::vector<double>(size_t(B * Hq * Lq * Dv), 0.0), std::vector<double>(size_t(B * Hq * Lq), 0.0)};
  std::vector<double> s(static_cast<size_t>(Lkv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hkv);
      for (int64_t i = 0; i < Lq; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Lkv; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < D; ++c) dot += Q[size_t(((b * Hq + h) * Lq + i) * D + c)] * K[size_t(((b * Hkv + hk) * Lkv + j) * D + c)];
          s[size_t(j)] = mask(b, h, i, j) ? score_mod(dot * scale, b, h, i, j) : -std::numeric_limits<double>::infinity();
          m = std::max(m, s[size_t(j)]);
        }
        const size_t row = size_t((b * Hq + h) * Lq + i);
        if (m == -std::numeric_limits<double>::infinity()) {
          r.lse[row] = m;
          continue;
        }
        double l = 0;
        for (double& x : s) l += (x = std::exp(x - m));
        r.lse[row] = m + std::log(l);
        for (int64_t c = 0; c < Dv; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < Lkv; ++j) acc += s[size_t(j)] / l * V[size_t(((b * Hkv + hk) * Lkv + j) * Dv + c)];
          r.out[row * size_t(Dv) + size_t(c)] = acc;
        }
      }
    }
  return r;
}

// The largest |a - b| (infinities must match exactly).
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0.0 : std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double d = std::abs(a[i] - b[i]);
    worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(worst, d);
  }
  return worst;
}

// Whether every |a - b| <= rel * |b| + abs.
inline bool within(const std::vector<double>& a, const std::vector<double>& b, double rel, double abs) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a[i] - b[i]) <= rel * std::abs(b[i]) + abs)) return false;
  return true;
}

template <class T>
std::vector<double> values(const kiln::Tensor<T>& t) {
  return t.template to<double>().contiguous().to_vector();
}

}  // namespace kiln_test
