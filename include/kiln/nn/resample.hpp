#pragma once
// Padding and resizing, as torch.nn.functional's pad and interpolate, and nn::Upsample:
//   F::pad(x, {left, right, top, bottom}, "constant" | "reflect" | "replicate" | "circular", value)
//   F::interpolate(x, F::InterpolateOptions().size({56, 56}).mode("bilinear").align_corners(false))
// Both are built from differentiable pieces (cat, narrow, index_select, elementwise weights), so their gradients
// come from those ops' backward on every device; the index arithmetic follows PyTorch's (its float rounding
// included), so the same source pixels are picked.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/options.hpp"
#include "kiln/nn/module.hpp"
#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/gather.hpp"
#include "kiln/tensor/join.hpp"

namespace kiln::nn {

namespace functional {

namespace detail {
// The source index of each of `count` output positions along a dim, as an index tensor on `device`.
inline Tensor<int64_t> index_tensor(const std::vector<int64_t>& indices, Device device) {
  return kiln::tensor<int64_t>(indices).to(device);
}
}  // namespace detail

// Pads (or, with negative amounts, crops) the last amounts.size() / 2 dims of x: amounts = {before_last,
// after_last, before_second_last, after_second_last, ...} as torch's. "constant" fills with value; "reflect"
// mirrors without repeating the edge (each amount below the dim's size), "replicate" repeats the edge, "circular"
// wraps around (each amount at most the size).
template <Dtype T>
Tensor<T> pad(const Tensor<T>& x, const std::vector<int64_t>& amounts, const std::string& mode = "constant",
              double value = 0) {
  check<std::invalid_argument>(amounts.size() % 2 == 0 && int(amounts.size() / 2) <= x.dim(), "pad: ", amounts.size(),
                               " amounts for input of shape ", x.shape(),
                               " (two per padded dim, at most two per dim)");
  check<std::invalid_argument>(mode == "constant" || mode == "reflect" || mode == "replicate" || mode == "circular",
                               "pad: mode must be constant, reflect, replicate or circular, got \"", mode, '"');
  check<std::invalid_argument>(mode == "constant" || value == 0, "pad: mode \"", mode,
                               "\" takes no value (", value, ")");
  Tensor<T> out = x;
  for (size_t k = 0; k < amounts.size() / 2; ++k) {
    const int d = x.dim() - 1 - int(k);
    const int64_t before = amounts[2 * k], after = amounts[2 * k + 1], n = out.size(d);
    check<ShapeError>(n + before + after >= 0, "pad: padding ", before, " and ", after, " of dim ", d, " of size ", n,
                      " leaves a negative size");
    if (mode == "constant") {
      // Crops first (negative amounts), then adds constant blocks.
      const int64_t start = std::max<int64_t>(-before, 0), stop = n - std::max<int64_t>(-after, 0);
      out = out.narrow(d, start, std::max<int64_t>(stop - start, 0));
      std::vector<Tensor<T>> parts;
      const auto block = [&](int64_t size) {
        Shape shape = out.shape();
        shape[d] = size;
        return full<T>(shape, T(value)).to(x.device());
      };
      if (before > 0) parts.push_back(block(before));
      parts.push_back(out);
      if (after > 0) parts.push_back(block(after));
      if (parts.size() > 1) out = cat(std::span<const Tensor<T>>(parts), d);
      continue;
    }
    check<ShapeError>(n > 0, "pad: ", mode, " padding of dim ", d, " of size 0");
    const int64_t limit = mode == "reflect" ? n - 1 : mode == "circular" ? n : before + after + n;
    check<ShapeError>(before <= limit && after <= limit, "pad: ", mode, " padding ", before, " and ", after,
                      " of dim ", d, " of size ", n, " must be at most ", limit,
                      mode == "reflect" ? " (below the size)" : "");
    std::vector<int64_t> source;
    for (int64_t i = -before; i < n + after; ++i) {
      int64_t s = i;
      if (mode == "reflect") s = s < 0 ? -s : s >= n ? 2 * (n - 1) - s : s;
      else if (mode == "replicate") s = std::clamp<int64_t>(s, 0, n - 1);
      else s = ((s % n) + n) % n;
      source.push_back(s);
    }
    out = index_select(out, d, detail::index_tensor(source, x.device()));
  }
  return out;
}

struct InterpolateOptions {
  // The output's spatial size, or scale factors (one per spatial dim, or one for all): exactly one of the two.
  KILN_OPTION(std::vector<int64_t>, size, {});
  KILN_OPTION(std::vector<double>, scale_factor, {});
  // "nearest" (any of 1 to 3 spatial dims), "linear" (3-d input), "bilinear" (4-d), "trilinear" (5-d).
  KILN_OPTION(std::string, mode, "nearest");
  KILN_OPTION(bool, align_corners, false);
};

namespace detail {
// PyTorch's scale from output to input coordinates: 1 / scale_factor when one was given, else in / out.
template <class A>
A source_scale(int64_t in, int64_t out, std::optional<double> scale_factor, bool align_corners) {
  if (align_corners) return out > 1 ? A(in - 1) / A(out - 1) : A(0);
  return scale_factor ? A(1.0 / *scale_factor) : A(in) / A(out);
}

// Resizes dim d of x to `out` positions by nearest-neighbour (floor of the scaled index, as PyTorch's "nearest").
template <Dtype T>
Tensor<T> nearest_along(const Tensor<T>& x, int d, int64_t out, std::optional<double> scale_factor) {
  using A = float;  // (PyTorch's nearest index is computed in float for every dtype)
  const int64_t in = x.size(d);
  const A scale = source_scale<A>(in, out, scale_factor, false);
  std::vector<int64_t> source;
  for (int64_t i = 0; i < out; ++i)
    source.push_back(std::min(int64_t(std::floor(A(i) * scale)), in - 1));
  return index_select(x, d, index_tensor(source, x.device()));
}

// Resizes dim d of x to `out` positions by linear interpolation between the two nearest sources.
template <Dtype T>
Tensor<T> linear_along(const Tensor<T>& x, int d, int64_t out, std::optional<double> scale_factor,
                       bool align_corners) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t in = x.size(d);
  const A scale = source_scale<A>(in, out, scale_factor, align_corners);
  std::vector<int64_t> lower, upper;
  std::vector<T> upper_weight, lower_weight;
  for (int64_t i = 0; i < out; ++i) {
    const A src = align_corners ? scale * A(i) : std::max(scale * (A(i) + A(0.5)) - A(0.5), A(0));
    const int64_t i0 = std::min(int64_t(src), in - 1);
    const A lambda = std::min(std::max(src - A(i0), A(0)), A(1));
    lower.push_back(i0);
    upper.push_back(i0 + (i0 < in - 1 ? 1 : 0));
    lower_weight.push_back(T(A(1) - lambda));
    upper_weight.push_back(T(lambda));
  }
  Shape weight_shape = Shape::filled(x.dim() - d, 1);
  weight_shape[0] = out;
  const auto weights = [&](const std::vector<T>& w) { return kiln::tensor<T>(w).reshape(weight_shape).to(x.device()); };
  return index_select(x, d, index_tensor(lower, x.device())) * weights(lower_weight) +
         index_select(x, d, index_tensor(upper, x.device())) * weights(upper_weight);
}
}  // namespace detail

template <Dtype T>
Tensor<T> interpolate(const Tensor<T>& x, const InterpolateOptions& o) {
  const std::string& mode = o.mode();
  const int spatial = x.dim() - 2;
  check<ShapeError>(spatial >= 1 && spatial <= 3, "interpolate: input of shape ", x.shape(),
                    " must be 3-, 4- or 5-d ([N, C, spatial...])");
  const int linear_dims = mode == "linear" ? 1 : mode == "bilinear" ? 2 : mode == "trilinear" ? 3 : 0;
  check<std::invalid_argument>(mode == "nearest" || linear_dims > 0,
                               "interpolate: mode must be nearest, linear, bilinear or trilinear, got \"", mode, '"');
  check<ShapeError>(linear_dims == 0 || linear_dims == spatial, "interpolate: mode \"", mode, "\" needs a ",
                    linear_dims + 2, "-d input, got shape ", x.shape());
  check<std::invalid_argument>(!(mode == "nearest" && o.align_corners()),
                               "interpolate: align_corners applies to the linear modes only, not nearest");
  const bool by_size = !o.size().empty(), by_scale = !o.scale_factor().empty();
  check<std::invalid_argument>(by_size != by_scale, "interpolate: give either size or scale_factor, not ",
                               by_size ? "both" : "neither");
  const size_t given = by_size ? o.size().size() : o.scale_factor().size();
  check<std::invalid_argument>(given == 1 || int(given) == spatial, "interpolate: ", given,
                               " sizes or scale factors for ", spatial, " spatial dims");
  Tensor<T> out = x;
  for (int k = 0; k < spatial; ++k) {
    const int d = 2 + k;
    const size_t at = given == 1 ? 0 : size_t(k);
    std::optional<double> scale;
    int64_t size;
    if (by_size) {
      size = o.size()[at];
    } else {
      scale = o.scale_factor()[at];
      check<std::invalid_argument>(*scale > 0, "interpolate: scale_factor must be positive, got ", *scale);
      size = int64_t(std::floor(double(x.size(d)) * *scale));
    }
    check<ShapeError>(size > 0, "interpolate: output size ", size, " of dim ", d, " (input ", x.shape(),
                      ") must be positive");
    if (size == x.size(d)) continue;  // copied as it is, whatever the scale factor (as PyTorch's kernels)
    out = mode == "nearest" ? detail::nearest_along(out, d, size, scale)
                            : detail::linear_along(out, d, size, scale, o.align_corners());
  }
  return out;
}

}  // namespace functional

using UpsampleOptions = functional::InterpolateOptions;

// F::interpolate as a module (torch.nn.Upsample). A class template, so that interpolate's kernels are compiled only
// where a program uses the module (as Conv2dImplT, nn/conv.hpp).
template <class = void>
class UpsampleImplT : public Module {
 public:
  explicit UpsampleImplT(const UpsampleOptions& options = {}) : Module("Upsample"), options(options) {}
  Tensor<float> forward(const Tensor<float>& x) override { return functional::interpolate(x, options); }
  void pretty_print(std::ostream& out) const override {
    const auto tuple = [&](const auto& values) {
      for (size_t i = 0; i < values.size(); ++i) out << (i == 0 ? "(" : ", ") << values[i];
      out << ')';
    };
    out << "Upsample(";
    if (!options.size().empty()) {
      out << "size=";
      tuple(options.size());
    } else {
      out << "scale_factor=";
      tuple(options.scale_factor());
    }
    out << ", mode='" << options.mode() << "')";
  }
  UpsampleOptions options;
};
using UpsampleImpl = UpsampleImplT<>;
KILN_INSTANTIATE(class UpsampleImplT<void>);
KILN_MODULE(Upsample);

}  // namespace kiln::nn
