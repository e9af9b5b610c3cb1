#pragma once
// 3x3, stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms
// for Convolutional Neural Networks", 2015). Each 2x2 output tile is
//     Y = A^T [ (G w G^T) (.) (B^T d B) ] A
// for its 4x4 input tile d: 16 multiplies instead of 36. Across channels the elementwise product (.) becomes
// 16 independent GEMMs, M[xi] = U[xi] V[xi] with U[xi] [Cout, Cin] the transformed weights and V[xi]
// [Cin, tiles] the transformed input tiles, so the GEMM work is 2.25x smaller than im2col's.
//
// The backward stays in the transformed domain, where the forward is linear in U and in V:
//     dM = A dY A^T per tile,  dV = U^T dM,  dU = dM V^T,  dx = scatter-add of B dV B^T,  dw = G^T dU G.
// Saved state is x and w (their transforms are recomputed; they cost a pass over memory, not GEMM time).
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/autograd/engine.hpp"
#include "kiln/cpu/gemm.hpp"
#include "kiln/cpu/parallel.hpp"
#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn::functional::detail::winograd {

template <size_t R, size_t C>
using Matrix = std::array<std::array<double, C>, R>;

template <size_t R, size_t C>
constexpr Matrix<C, R> transposed(const Matrix<R, C>& m) {
  Matrix<C, R> t{};
  for (size_t i = 0; i < R; ++i)
    for (size_t j = 0; j < C; ++j) t[j][i] = m[i][j];
  return t;
}

inline constexpr Matrix<4, 4> kBt{{{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}}};
inline constexpr Matrix<4, 3> kG{{{1, 0, 0}, {.5, .5, .5}, {.5, -.5, .5}, {0, 0, 1}}};
inline constexpr Matrix<2, 4> kAt{{{1, 1, 1, 0}, {0, 1, -1, -1}}};
inline constexpr Matrix<4, 4> kB = transposed(kBt);
inline constexpr Matrix<3, 4> kGt = transposed(kG);
inline constexpr Matrix<4, 2> kA = transposed(kAt);

constexpr int64_t kTile = 16;  // transformed values per tile, xi = 4 * row + col

// The distance between the 16 matrices of a transformed buffer, for `n` elements each: n rounded up to an
// odd number of 64-byte cache lines. Every transform reads or writes all 16 matrices at once, one element
// each per tile; with a power-of-two distance (64 channels x 3136 tiles x 4 bytes is 196 pages) the 16
// streams all map to one L1 set and evict one another on every tile, which made the transforms slower than
// the GEMMs. An odd number of lines puts them in 16 different sets.
template <class T>
constexpr int64_t matrix_stride(int64_t n) {
  constexpr int64_t line = 64 / sizeof(T);
  const int64_t lines = (n + line - 1) / line;
  return (lines | 1) * line;
}

template <size_t N, class F>
[[gnu::always_inline]] inline void static_for(F&& f) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (f(std::integral_constant<size_t, I>{}), ...);
  }(std::make_index_sequence<N>{});
}

// sum_k P[i][k] * get(k) with the zero terms dropped and +-1 terms added without a multiply, decided at
// compile time. The sum starts at -0.0 because x + (-0.0) == x exactly, so the compiler drops that add.
template <const auto& P, size_t I, class T, class Get>
[[gnu::always_inline]] inline T combine(Get&& get) {
  T s = T(-0.0);
  static_for<P[I].size()>([&](auto k) {
    constexpr double c = P[I][decltype(k)::value];
    if constexpr (c == 1)
      s += get(k);
    else if constexpr (c == -1)
      s -= get(k);
    else if constexpr (c != 0)
      s += T(c) * get(k);
  });
  return s;
}

// out(i, j, P X P^T [i][j]) for the C x C matrix read by x(k, l): the one shape every transform of this file
// has (P = B^T, G, A^T for the forward, B, G^T, A for their adjoints).
template <const auto& P, class T, class In, class Out>
[[gnu::always_inline]] inline void congruence(In&& x, Out&& out) {
  constexpr size_t R = P.size(), C = P[0].size();
  T px[R][C];
  static_for<R>([&](auto i) {
    static_for<C>([&](auto j) { px[i][j] = combine<P, i, T>([&](auto k) { return x(k, j); }); });
  });
  static_for<R>([&](auto i) {
    static_for<R>([&](auto j) { out(i, j, combine<P, j, T>([&](auto k) { return px[i][k]; })); });
  });
}

// The tiles of one convolution: th x tw tiles of 2x2 outputs per plane, the last row or column of tiles
// partly outside the output when Ho or Wo is odd. Tile (ty, tx) reads the input rows 2 ty - ph .. +3.
struct Tiling {
  int64_t n, h, w, ph, pw, ho, wo, th, tw;
  Tiling(int64_t n_, int64_t h_, int64_t w_, int64_t ph_, int64_t pw_)
      : n(n_), h(h_), w(w_), ph(ph_), pw(pw_), ho(h_ + 2 * ph_ - 2), wo(w_ + 2 * pw_ - 2), th((ho + 1) / 2),
        tw((wo + 1) / 2) {}
  int64_t tiles() const { return th * tw; }
  int64_t columns() const { return n * tiles(); }  // of the GEMMs: every tile of every sample
};

// The tiles of one plane, in SIMD across tiles: out[(R i + j) out_stride + t] = (P X_t P^T)[i][j] with
// X_t[k][l] = in[(C k + l) in_stride + t], for P of R x C. Both sides are either the 16 (or 4) streams of a
// transformed buffer or a plane's tiles gathered into scratch rows; the tiles are contiguous in both.
template <const auto& P, class T>
void transform_tiles(int64_t tiles, const T* in, int64_t in_stride, T* out, int64_t out_stride) {
  constexpr size_t R = P.size(), C = P[0].size();
#ifdef _OPENMP
#pragma omp simd
#endif
  for (int64_t t = 0; t < tiles; ++t)
    congruence<P, T>([&](size_t k, size_t l) { return in[int64_t(C * k + l) * in_stride + t]; },
                     [&](size_t i, size_t j, T value) { out[int64_t(R * i + j) * out_stride + t] = value; });
}

// A plane inside a zero border: the tiles read (and the adjoints write) the bordered plane with no bounds
// tests, and only whole rows are copied in and out.
struct Bordered {
  int64_t rows, cols, top, left;  // the plane of h x w sits at (top, left)

  // out = the h x w plane with its border of zeros.
  template <class T>
  void fill(const T* plane, int64_t h, int64_t w, T* out) const {
    for (int64_t r = 0; r < rows; ++r) {
      T* row = out + r * cols;
      const int64_t ir = r - top, copied = std::clamp<int64_t>(w, 0, cols - left);
      if (ir < 0 || ir >= h) {
        std::fill(row, row + cols, T(0));
        continue;
      }
      std::fill(row, row + left, T(0));
      std::copy(plane + ir * w, plane + ir * w + copied, row + left);
      std::fill(row + left + copied, row + cols, T(0));
    }
  }
  // plane = the h x w window of the bordered plane (what lies in the border is dropped).
  template <class T>
  void crop(const T* bordered, int64_t h, int64_t w, T* plane) const {
    for (int64_t r = 0; r < h; ++r) {
      const T* row = bordered + (r + top) * cols + left;
      std::copy(row, row + w, plane + r * w);
    }
  }
};

// Calls f(n, c, bordered, tiles) for each (sample, channel) plane of [N, channels] across threads, with
// per-thread scratch for a bordered plane and its tiles (`per_tile` values per tile).
template <class T, class F>
void for_each_plane(const Tiling& s, int64_t channels, const Bordered& b, int64_t per_tile, F&& f) {
  const int64_t plane = b.rows * b.cols;
  cpu::parallel_for(s.n * channels, plane * 8, 1, [&](int64_t begin, int64_t end) {
    std::unique_ptr<T[]> scratch(new T[plane + per_tile * s.tiles()]);
    for (int64_t p = begin; p < end; ++p) f(p / channels, p % channels, scratch.get(), scratch.get() + plane);
  });
}

// Between a bordered plane and its tiles: tiles[(K i + j) tiles + t] is the element (2 ty + i, 2 tx + j) of
// the bordered plane for tile t = (ty, tx). kToPlane writes the plane instead (+= with kAdd).
template <int64_t K, bool kToPlane, bool kAdd = false, class T>
void tile_values(T* bordered, int64_t cols, const Tiling& s, T* tiles) {
  const int64_t count = s.tiles();
  for (int64_t ty = 0; ty < s.th; ++ty)
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < K; ++j) {
        T* row = bordered + (2 * ty + i) * cols + j;
        T* values = tiles + (K * i + j) * count + ty * s.tw;
        for (int64_t tx = 0; tx < s.tw; ++tx) {
          if constexpr (!kToPlane)
            values[tx] = row[2 * tx];
          else if constexpr (kAdd)
            row[2 * tx] += values[tx];
          else
            row[2 * tx] = values[tx];
        }
      }
}

// The bordered planes of the input (4x4 tiles, the padding as border) and of the output (2x2 tiles).
inline Bordered input_border(const Tiling& s) { return {2 * s.th + 2, 2 * s.tw + 2, s.ph, s.pw}; }
inline Bordered output_border(const Tiling& s) { return {2 * s.th, 2 * s.tw, 0, 0}; }

// v[xi][c][n * tiles + t] = (B^T d B)[xi] for the input tile d of tile t of plane (n, c) of x [N, C, H, W].
template <class T>
void transform_input(const T* x, int64_t channels, const Tiling& s, T* v) {
  const int64_t stride = matrix_stride<T>(channels * s.columns());
  const Bordered b = input_border(s);
  for_each_plane<T>(s, channels, b, kTile, [&](int64_t n, int64_t c, T* bordered, T* tiles) {
    b.fill(x + (n * channels + c) * s.h * s.w, s.h, s.w, bordered);
    tile_values<4, false>(bordered, b.cols, s, tiles);
    transform_tiles<kBt>(s.tiles(), tiles, s.tiles(), v + c * s.columns() + n * s.tiles(), stride);
  });
}

// The adjoint of transform_input: dx [N, C, H, W] = the scatter-add over tiles of B dv B^T.
template <class T>
void transform_input_adjoint(const T* dv, int64_t channels, const Tiling& s, T* dx) {
  const int64_t stride = matrix_stride<T>(channels * s.columns());
  const Bordered b = input_border(s);
  for_each_plane<T>(s, channels, b, kTile, [&](int64_t n, int64_t c, T* bordered, T* tiles) {
    transform_tiles<kB>(s.tiles(), dv + c * s.columns() + n * s.tiles(), stride, tiles, s.tiles());
    std::fill(bordered, bordered + b.rows * b.cols, T(0));
    tile_values<4, true, true>(bordered, b.cols, s, tiles);
    b.crop(bordered, s.h, s.w, dx + (n * channels + c) * s.h * s.w);
  });
}

// y [N, C, Ho, Wo] from m[xi][c][n * tiles + t]: each tile's A^T m A, clipped to the output.
template <class T>
void transform_output(const T* m, int64_t channels, const Tiling& s, T* y) {
  const int64_t stride = matrix_stride<T>(channels * s.columns());
  const Bordered b = output_border(s);
  for_each_plane<T>(s, channels, b, 4, [&](int64_t n, int64_t c, T* bordered, T* tiles) {
    transform_tiles<kAt>(s.tiles(), m + c * s.columns() + n * s.tiles(), stride, tiles, s.tiles());
    tile_values<2, true>(bordered, b.cols, s, tiles);
    b.crop(bordered, s.ho, s.wo, y + (n * channels + c) * s.ho * s.wo);
  });
}

// The adjoint of transform_output: dm[xi][c][n * tiles + t] = (A dy A^T)[xi] for the tile's 2x2 of dy,
// zeros where the tile sticks out of the output.
template <class T>
void transform_output_adjoint(const T* dy, int64_t channels, const Tiling& s, T* dm) {
  const int64_t stride = matrix_stride<T>(channels * s.columns());
  const Bordered b = output_border(s);
  for_each_plane<T>(s, channels, b, 4, [&](int64_t n, int64_t c, T* bordered, T* tiles) {
    b.fill(dy + (n * channels + c) * s.ho * s.wo, s.ho, s.wo, bordered);
    tile_values<2, false>(bordered, b.cols, s, tiles);
    transform_tiles<kA>(s.tiles(), tiles, s.tiles(), dm + c * s.columns() + n * s.tiles(), stride);
  });
}

// u[xi][o][c] = (G w[o][c] G^T)[xi] for w [Cout, Cin, 3, 3] (a small pass: the weights are few).
template <class T>
void transform_weight(const T* w, int64_t cout, int64_t cin, T* u) {
  const int64_t stride = matrix_stride<T>(cout * cin);
  cpu::parallel_for(cout * cin, 64, 1, [&](int64_t b, int64_t e) {
    for (int64_t oc = b; oc < e; ++oc)
      congruence<kG, T>([&](size_t i, size_t j) { return w[oc * 9 + i * 3 + j]; },
                        [&](size_t i, size_t j, T value) { u[(4 * i + j) * stride + oc] = value; });
  });
}

// The adjoint of transform_weight: dw[o][c] = G^T du[.][o][c] G.
template <class T>
void transform_weight_adjoint(const T* du, int64_t cout, int64_t cin, T* dw) {
  const int64_t stride = matrix_stride<T>(cout * cin);
  cpu::parallel_for(cout * cin, 64, 1, [&](int64_t b, int64_t e) {
    for (int64_t oc = b; oc < e; ++oc)
      congruence<kGt, T>([&](size_t i, size_t j) { return du[(4 * i + j) * stride + oc]; },
                         [&](size_t i, size_t j, T value) { dw[oc * 9 + i * 3 + j] = value; });
  });
}

// c[xi] = a[xi] b[xi] for the 16 xi of transformed buffers, each operand given by its row and column strides.
template <class T>
void products(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t b_rs,
              int64_t b_cs, T* c) {
  cpu::gemm_batched<T>(kTile, m, n, k, a, matrix_stride<T>(m * k), a_rs, a_cs, b, matrix_stride<T>(k * n), b_rs,
                       b_cs, c, matrix_stride<T>(m * n), n, 1);
}

// The 16 transformed matrices of `rows` x `cols` elements each, uninitialized: every element used is
// written before it is read. From the tensor allocator's cache: fresh system memory each step would cost
// the kernel's page zeroing on every first touch.
template <Dtype T>
T* transformed(int64_t rows, int64_t cols, std::vector<Tensor<T>>& owner) {
  owner.push_back(empty<T>({kTile * matrix_stride<T>(rows * cols)}));
  return owner.back().data_ptr();
}

template <Dtype T>
struct WinogradConvBackward : autograd::Node {
  WinogradConvBackward(const autograd::ImplPtr& x, const autograd::ImplPtr& w, const Tiling& s)
      : x_(x), w_(w), s_(s) {
    next_edges.push_back(autograd::gradient_edge(x));
    next_edges.push_back(autograd::gradient_edge(w));
  }
  std::string name() const override { return "ConvolutionBackward"; }
  void release_saved() override { x_ = w_ = {}; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr, nullptr};
    const Tensor<T> g = Tensor<T>(grads[0]).contiguous(), x(x_.unpack(*this)), w(w_.unpack(*this));
    const int64_t cout = w.size(0), cin = w.size(1), cols = s_.columns();
    std::vector<Tensor<T>> buffers;
    T* dm = transformed<T>(cout, cols, buffers);
    transform_output_adjoint(g.data_ptr(), cout, s_, dm);
    autograd::GradList out(2);
    if (next_edges[0].valid()) {
      T *u = transformed<T>(cout, cin, buffers), *dv = transformed<T>(cin, cols, buffers);
      transform_weight(w.data_ptr(), cout, cin, u);
      products<T>(cin, cols, cout, u, 1, cin, dm, cols, 1, dv);  // U^T dM
      Tensor<T> dx(TensorImpl::allocate(x.shape(), scalar_type_of<T>(), "conv2d backward"));
      transform_input_adjoint(dv, cin, s_, dx.data_ptr());
      out[0] = dx.impl_ptr();
    }
    if (next_edges[1].valid()) {
      T *v = transformed<T>(cin, cols, buffers), *du = transformed<T>(cout, cin, buffers);
      transform_input(x.data_ptr(), cin, s_, v);
      products<T>(cout, cin, cols, dm, cols, 1, v, 1, cols, du);  // dM V^T
      Tensor<T> dw(TensorImpl::allocate(w.shape(), scalar_type_of<T>(), "conv2d backward"));
      transform_weight_adjoint(du, cout, cin, dw.data_ptr());
      out[1] = dw.impl_ptr();
    }
    return out;
  }

 private:
  autograd::SavedTensor x_, w_;  // contiguous
  Tiling s_;
};

// y [N, Cout, H + 2 ph - 2, W + 2 pw - 2] = x [N, Cin, H, W] convolved with w [Cout, Cin, 3, 3] (stride 1,
// no dilation, one group, no bias; the caller checked the shapes and that the output is not empty).
template <Dtype T>
Tensor<T> conv2d(const Tensor<T>& x, const Tensor<T>& weight, int64_t ph, int64_t pw) {
  const Tensor<T> xc = x.contiguous(), wc = weight.contiguous();
  const int64_t cout = wc.size(0), cin = wc.size(1);
  const Tiling s(xc.size(0), xc.size(2), xc.size(3), ph, pw);
  const int64_t cols = s.columns();
  std::vector<Tensor<T>> buffers;
  T* u = transformed<T>(cout, cin, buffers);
  T* v = transformed<T>(cin, cols, buffers);
  T* m = transformed<T>(cout, cols, buffers);
  transform_weight(wc.data_ptr(), cout, cin, u);
  transform_input(xc.data_ptr(), cin, s, v);
  products<T>(cout, cols, cin, u, cin, 1, v, cols, 1, m);  // M = U V
  Tensor<T> y(TensorImpl::allocate({s.n, cout, s.ho, s.wo}, scalar_type_of<T>(), "conv2d"));
  transform_output(m, cout, s, y.data_ptr());
  if (GradMode::is_enabled() && (autograd::requires_grad(x.impl()) || autograd::requires_grad(weight.impl())))
    autograd::meta_of(y.impl_ptr()).grad_fn =
        std::make_shared<WinogradConvBackward<T>>(xc.impl_ptr(), wc.impl_ptr(), s);
  return y;
}

}  // namespace kiln::nn::functional::detail::winograd
