#pragma once
// Random tensors, as libtorch's: rand, randn, randint, normal, randperm, bernoulli, multinomial, the *_like forms, and the
// in-place fills uniform_, normal_, random_, bernoulli_. Values follow core/generator.hpp's Philox mapping over
// the elements in row-major order, so one (seed, offset) gives the same tensor for any thread count (and, with
// the same mapping in a kernel, on the GPU). gen = nullptr means kiln::default_generator().
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/core/generator.hpp"
#include "kiln/tensor/device_copy.hpp"
#include "kiln/tensor/factory.hpp"

namespace kiln {

namespace detail {

inline Generator& generator_or_default(Generator* gen) { return gen ? *gen : default_generator(); }

// Runs fill(ptr, n) over t's elements in row-major order: in t's memory when it is contiguous, else into a
// contiguous temporary that is then copied in, so a view gets the values a fresh tensor of its shape would.
// An expanded destination, or one that requires grad in grad mode (as copy_ refuses), is refused under op's name
// before anything is drawn (the generator does not move).
template <Dtype T>
void check_random_destination(const Tensor<T>& t, const char* op) {
  check_no_internal_overlap(t.impl(), op);
  check_untracked_write(t.impl(), op);
}
template <Dtype T, class Fill>
Tensor<T> fill_random(const Tensor<T>& t, const char* op, Fill fill) {
  check_random_destination(t, op);
  Tensor<T> dst = t;
  if (dst.is_cuda()) {  // drawn on the host from the same generator, so a CUDA tensor gets the CPU's values
    Tensor<T> tmp = empty<T>(dst.shape());
    fill(tmp.data_ptr(), tmp.numel());
    dst.copy_(tmp);
  } else if (dst.is_contiguous()) {
    fill(dst.data_ptr(), dst.numel());
    dst.impl().storage->bump_version();  // an in-place write, as copy_ would record
  } else {
    Tensor<T> tmp = empty<T>(dst.shape());
    fill(tmp.data_ptr(), tmp.numel());
    dst.copy_(tmp);
  }
  return dst;
}

}  // namespace detail

// ---- in place ---------------------------------------------------------------------------------

// Uniform in [from, to) (t.uniform_(from, to)).
template <Dtype T>
Tensor<T> uniform_(const Tensor<T>& t, double from = 0, double to = 1, Generator* gen = nullptr) {
  static_assert(is_floating_v<T>, "kiln: uniform_ needs a floating dtype; use randint or random_ for integers");
  Generator& g = detail::generator_or_default(gen);
  return detail::fill_random(t, "uniform_", [&](T* p, int64_t n) { fill_uniform(g, p, n, from, to); });
}

// Normal(mean, std) (t.normal_(mean, std)).
template <Dtype T>
Tensor<T> normal_(const Tensor<T>& t, double mean = 0, double std = 1, Generator* gen = nullptr) {
  static_assert(is_floating_v<T>, "kiln: normal_ needs a floating dtype; use randint or random_ for integers");
  Generator& g = detail::generator_or_default(gen);
  return detail::fill_random(t, "normal_", [&](T* p, int64_t n) { fill_normal(g, p, n, mean, std); });
}

// Integers in [from, to) (t.random_(from, to)).
template <Dtype T>
Tensor<T> random_(const Tensor<T>& t, int64_t from, int64_t to, Generator* gen = nullptr) {
  Generator& g = detail::generator_or_default(gen);
  if constexpr (std::is_same_v<T, bool>) {
    // fill_randint range-checks with std::cmp_less, which rejects bool: draw int32 in [from, to) and convert.
    check(from >= 0 && to <= 2, "random_: range [", from, ", ", to, ") does not fit bool");
    detail::check_random_destination(t, "random_");
    Tensor<int32_t> tmp = empty<int32_t>(t.shape());
    fill_randint(g, tmp.data_ptr(), tmp.numel(), from, to);
    Tensor<T> dst = t;
    dst.copy_(tmp.template to<bool>());
    return dst;
  } else {
    return detail::fill_random(t, "random_", [&](T* p, int64_t n) { fill_randint(g, p, n, from, to); });
  }
}
// Integers in [0, to).
template <Dtype T>
Tensor<T> random_(const Tensor<T>& t, int64_t to, Generator* gen = nullptr) { return random_(t, 0, to, gen); }

// 1 with probability p, else 0 (t.bernoulli_(p)).
template <Dtype T>
Tensor<T> bernoulli_(const Tensor<T>& t, double p = 0.5, Generator* gen = nullptr) {
  Generator& g = detail::generator_or_default(gen);
  return detail::fill_random(t, "bernoulli_", [&](T* q, int64_t n) { fill_bernoulli(g, q, n, p); });
}

// ---- factories --------------------------------------------------------------------------------

template <Dtype T = float>
Tensor<T> rand(const Shape& shape, Generator* gen = nullptr) { return uniform_(empty<T>(shape), 0, 1, gen); }
template <Dtype T = float>
Tensor<T> randn(const Shape& shape, Generator* gen = nullptr) { return normal_(empty<T>(shape), 0, 1, gen); }
template <Dtype T = float>
Tensor<T> normal(double mean, double std, const Shape& shape, Generator* gen = nullptr) {
  return normal_(empty<T>(shape), mean, std, gen);
}
template <Dtype T = int64_t>
Tensor<T> randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr) {
  return random_(empty<T>(shape), low, high, gen);
}
template <Dtype T = int64_t>
Tensor<T> randint(int64_t high, const Shape& shape, Generator* gen = nullptr) {
  return randint<T>(0, high, shape, gen);
}

// On t's device (drawn on the host, as a CPU tensor's would be).
template <Dtype T>
Tensor<T> rand_like(const Tensor<T>& t, Generator* gen = nullptr) { return rand<T>(t.shape(), gen).to(t.device()); }
template <Dtype T>
Tensor<T> randn_like(const Tensor<T>& t, Generator* gen = nullptr) { return randn<T>(t.shape(), gen).to(t.device()); }
template <Dtype T>
Tensor<T> randint_like(const Tensor<T>& t, int64_t low, int64_t high, Generator* gen = nullptr) {
  return randint<T>(low, high, t.shape(), gen).to(t.device());
}

// Each element 1 with the probability held at its place in p (torch.bernoulli(p)). Compares a uniform draw in
// float (double for double p), so a bfloat16 p is not limited to bfloat16's 8-bit uniforms.
template <Dtype T>
Tensor<T> bernoulli(const Tensor<T>& p, Generator* gen = nullptr) {
  static_assert(is_floating_v<T>, "kiln: bernoulli needs a floating dtype; use randint or random_ for integers");
  using U = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Tensor<U> u = rand<U>(p.shape(), gen).to(p.device());
  const Tensor<U> pu = p.template to<U>();
  return Tensor<T>((u < pu).template to<T>());
}
// A tensor of p's shape whose elements are 1 with probability `prob` (torch.bernoulli(input, p)).
template <Dtype T>
Tensor<T> bernoulli(const Tensor<T>& like, double prob, Generator* gen = nullptr) {
  return bernoulli_(empty<T>(like.shape(), like.device()), prob, gen);
}

// Indices drawn from the categories of each row of probs [n] or [rows, n] (non-negative weights, not
// necessarily normalized; torch.multinomial): num_samples per row, with or without replacement (without:
// each draw removes its category). One uniform per draw, found in the row's running sum (in double).
template <Dtype T>
Tensor<int64_t> multinomial(const Tensor<T>& probs, int64_t num_samples, bool replacement = false,
                            Generator* gen = nullptr) {
  static_assert(is_floating_v<T>, "kiln: multinomial needs floating-point probabilities");
  check<ShapeError>(probs.dim() == 1 || probs.dim() == 2, "multinomial: expected probabilities [n] or [rows, n], got ",
                    probs.shape());
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1, n = probs.size(-1);
  check(num_samples >= 1 && (replacement || num_samples <= n), "multinomial: cannot draw ", num_samples, " samples from ",
        n, " categories ", replacement ? "" : "without replacement");
  const Tensor<double> p = probs.template to<double>().cpu().contiguous();  // (drawn on the host)
  const Tensor<double> u = rand<double>({rows, num_samples}, gen);
  Tensor<int64_t> out = empty<int64_t>(probs.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples});
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(p.data_ptr() + r * n, p.data_ptr() + (r + 1) * n, w.begin());
    for (double x : w)
      check(x >= 0 && std::isfinite(x), "multinomial: probabilities must be finite and non-negative, row ", r, " has ", x);
    for (int64_t s = 0; s < num_samples; ++s) {
      double total = 0;
      for (double x : w) total += x;
      check(total > 0, "multinomial: row ", r, " has no category with positive probability left");
      const double target = u.data_ptr()[r * num_samples + s] * total;
      int64_t pick = 0;
      double run = 0;
      for (; pick < n - 1; ++pick)  // the last positive category takes what rounding leaves
        if (w[size_t(pick)] > 0 && (run += w[size_t(pick)]) > target) break;
      while (w[size_t(pick)] == 0) --pick;
      out.data_ptr()[r * num_samples + s] = pick;
      if (!replacement) w[size_t(pick)] = 0;
    }
  }
  return out.to(probs.device());
}

// A random permutation of 0 .. n-1 (torch.randperm): sorts n random 64-bit keys, ties broken by index, so the
// result depends on the generator alone, never on the thread count.
template <Dtype T = int64_t>
Tensor<T> randperm(int64_t n, Generator* gen = nullptr) {
  check(n >= 0, "randperm: n must be non-negative, got ", n);
  std::vector<int64_t> keys(static_cast<size_t>(n));
  fill_randint(detail::generator_or_default(gen), keys.data(), n, std::numeric_limits<int64_t>::min(),
               std::numeric_limits<int64_t>::max());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return keys[size_t(a)] != keys[size_t(b)] ? keys[size_t(a)] < keys[size_t(b)] : a < b;
  });
  Tensor<T> out = empty<T>({n});
  std::transform(order.begin(), order.end(), out.data_ptr(), [](int64_t i) { return static_cast<T>(i); });
  return out;
}

}  // namespace kiln
