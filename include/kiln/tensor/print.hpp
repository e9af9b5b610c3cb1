#pragma once
// operator<< for Tensor<T>, in PyTorch's layout with its default print options (torch/_tensor_str.py):
//   tensor([[1., 2.],            integer-valued floats print as "1.", others with 4 decimals, and in scientific
//           [3., 4.]])           notation when the visible nonzero finite values span more than 1000x, pass 1e8,
//                                or (non-integers) go below 1e-4; all values share one width.
// Over 1000 elements, each dim longer than 6 shows its first and last 3 entries around "...". Lines wrap at 80
// columns. A dtype suffix follows as in PyTorch ("dtype=int32"; none for float32, int64 and bool), and empty
// tensors print "tensor([], size=(0, 3))".
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/tensor/device_copy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

// PyTorch's default print options.
struct PrintOptions {
  static constexpr int precision = 4;
  static constexpr int64_t threshold = 1000;  // more elements than this are summarized
  static constexpr int64_t edgeitems = 3;     // entries kept at each end of a summarized dim
  static constexpr int linewidth = 80;
};

namespace detail::printing {

// Python's "{:.{p}f}" and "{:.{p}e}" of a double: printf's, except that every NaN prints "nan" (glibc: "-nan").
inline std::string format_double(double v, char conv, int precision) {
  if (std::isnan(v)) return "nan";
  char buf[400];  // %.4f of values up to 1e308 fits
  std::snprintf(buf, sizeof buf, conv == 'e' ? "%.*e" : "%.*f", precision, v);
  return buf;
}

// Values as Python sees them after .tolist(): floats as double, integers as int64, bools as bool.
template <class T>
using py_value_t =
    std::conditional_t<is_floating_v<T>, double, std::conditional_t<std::is_same_v<T, bool>, bool, int64_t>>;

// torch's _Formatter: one width and one notation for all the values it was built from.
template <class V>
struct Formatter {
  bool int_mode = true, sci_mode = false;
  size_t width = 1;

  explicit Formatter(const std::vector<V>& values) {
    if constexpr (!std::is_same_v<V, double>) {
      for (V v : values) width = std::max(width, plain(v).size());
    } else {
      double lo = INFINITY, hi = 0;
      bool any = false;
      for (double v : values) {
        if (v == 0 || !std::isfinite(v)) continue;
        any = true;
        lo = std::min(lo, std::fabs(v));
        hi = std::max(hi, std::fabs(v));
        int_mode &= v == std::ceil(v);
      }
      if (!any) return;  // only zeros, infinities and NaNs: "0.", "inf", "nan"
      sci_mode = hi / lo > 1000.0 || hi > 1.0e8 || (!int_mode && lo < 1.0e-4);
      for (double v : values) {
        if (v == 0 || !std::isfinite(v)) continue;
        const size_t w = sci_mode ? format_double(v, 'e', PrintOptions::precision).size()
                         : int_mode ? format_double(v, 'f', 0).size() + 1  // + 1 for the "."
                                    : format_double(v, 'f', PrintOptions::precision).size();
        width = std::max(width, w);
      }
    }
  }

  static std::string plain(V v) {
    if constexpr (std::is_same_v<V, bool>) return v ? "True" : "False";
    else return std::to_string(v);
  }

  std::string format(V v) const {
    std::string s;
    if constexpr (std::is_same_v<V, double>) {
      if (sci_mode) {
        s = format_double(v, 'e', PrintOptions::precision);
      } else if (int_mode) {
        s = format_double(v, 'f', 0);
        if (std::isfinite(v)) s += '.';
      } else {
        s = format_double(v, 'f', PrintOptions::precision);
      }
    } else {
      s = plain(v);
    }
    return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
  }
};

template <Dtype T>
struct Printer {
  using V = py_value_t<T>;
  const T* data;  // at the tensor's storage offset
  const TensorImpl& t;
  bool summarize;

  V at(int64_t offset) const { return V(compute_t<T>(data[offset])); }

  // The indices shown along a dim of size n; -1 marks the "..." of a summarized dim.
  std::vector<int64_t> shown(int64_t n) const {
    std::vector<int64_t> idx;
    const bool cut = summarize && n > 2 * PrintOptions::edgeitems;
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == PrintOptions::edgeitems) {
        idx.push_back(-1);
        i = n - PrintOptions::edgeitems;
      }
      idx.push_back(i);
    }
    return idx;
  }

  // The values that will be shown (torch's get_summarized_data): the formatter is built from these alone.
  void collect(int d, int64_t offset, std::vector<V>& out) const {
    if (d == t.shape.size()) return out.push_back(at(offset));
    for (int64_t i : shown(t.shape[d]))
      if (i >= 0) collect(d + 1, offset + i * t.strides[d], out);
  }

  std::string str(int d, int64_t offset, int indent, const Formatter<V>& f) const {
    const int rank = t.shape.size();
    if (d == rank) return f.format(at(offset));
    std::vector<std::string> parts;
    for (int64_t i : shown(t.shape[d]))
      parts.push_back(i < 0 ? (d == rank - 1 ? " ..." : "...")
                            : d == rank - 1 ? f.format(at(offset + i * t.strides[d]))
                                            : str(d + 1, offset + i * t.strides[d], indent + 1, f));
    std::string s = "[";
    if (d == rank - 1) {  // a row: ", " between entries, wrapped to the line width
      const size_t per_line = size_t(std::max<int64_t>(1, (PrintOptions::linewidth - indent) / int64_t(f.width + 2)));
      for (size_t i = 0; i < parts.size(); ++i)
        s += (i == 0 ? "" : i % per_line ? ", " : ",\n" + std::string(size_t(indent + 1), ' ')) + parts[i];
    } else {  // blocks: each on its own line, with rank - d - 2 blank lines between them
      const std::string sep = "," + std::string(size_t(rank - d - 1), '\n') + std::string(size_t(indent + 1), ' ');
      for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
    }
    return s + "]";
  }
};

}  // namespace detail::printing

template <Dtype T>
std::ostream& operator<<(std::ostream& out, const Tensor<T>& t) {
  if (!t.defined()) return out << "[ Tensor (undefined) ]";
  const std::string prefix = "tensor(";
  const int indent = int(prefix.size());
  std::vector<std::string> suffixes;
  // A CUDA tensor prints a host copy of its values, with its device first among the suffixes (as torch's).
  if (t.is_cuda()) suffixes.push_back("device='" + t.device().str() + "'");
  std::string body;
  const ScalarType dt = t.dtype();
  if (t.numel() == 0) {
    if (t.dim() != 1) {  // Python's tuple: (0, 3)
      std::string size = "size=(";
      for (int i = 0; i < t.dim(); ++i) size += (i ? ", " : "") + std::to_string(t.size(i));
      suffixes.push_back(size + ")");
    }
    if (dt != ScalarType::Float) suffixes.push_back(std::string("dtype=") + dtype_name(dt));
    body = "[]";
  } else {
    if (dt != ScalarType::Float && dt != ScalarType::Int64 && dt != ScalarType::Bool)
      suffixes.push_back(std::string("dtype=") + dtype_name(dt));
    using P = detail::printing::Printer<T>;
    // (Not t.cpu(): that would compile Tensor::to and its backward node into every program that can print.)
    const std::shared_ptr<TensorImpl> values = t.is_cuda() ? detail::host_view_of(t.impl(), "printing") : t.impl_ptr();
    const P p{reinterpret_cast<const T*>(values->data_bytes()), *values, t.numel() > PrintOptions::threshold};
    std::vector<typename P::V> shown;
    p.collect(0, 0, shown);
    body = p.str(0, 0, indent, detail::printing::Formatter<typename P::V>(shown));
  }
  // torch's _add_suffixes: a suffix that would pass the line width goes on a new line.
  std::string s = prefix + body;
  const size_t nl = s.rfind('\n');
  int64_t last_line = int64_t(s.size()) - (nl == std::string::npos ? -1 : int64_t(nl)) + 1;  // torch's count
  for (const std::string& suffix : suffixes) {
    if (last_line + int64_t(suffix.size()) + 2 > PrintOptions::linewidth) {
      s += ",\n" + std::string(size_t(indent), ' ') + suffix;
      last_line = indent + int64_t(suffix.size());
    } else {
      s += ", " + suffix;
      last_line += int64_t(suffix.size()) + 2;
    }
  }
  return out << s << ')';
}

}  // namespace kiln
