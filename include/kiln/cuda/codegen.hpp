#pragma once
// CUDA source for an expression tree, from the op table's `cuda` strings: the fused forward kernel and the
// fused backward kernel (every leaf's gradient in one pass, as autograd/derive.hpp does on the CPU). Pure C++:
// no CUDA header is needed to generate (or to test) the source.
//
// A kernel is one grid-stride loop over the output's elements. Each node's value is a local variable (the
// tape), so a node is computed once however often its parent's source names it; the backward sweep binds
// each op's derivative to those variables. Everything the kernel reads is in one descriptor block of
// 8-byte words (built by the host with forward_descriptor/backward_descriptor below):
//   n | size[rank] | out[outputs] | out_stride[outputs][rank] | in[inputs] | stride[inputs][rank] | scalar[scalars]
// (the size and stride arrays only in the strided variant; an array of length 0 is left out). The block is
// passed by value, or by pointer (copied to the device) when it exceeds kMaxParameterBytes, so an
// expression with any number of leaves launches. Scalars of the expression are descriptor words, not
// literals, so one kernel serves every value; the constants of a derivative (x * 2) are literals.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kiln/autograd/derive.hpp"
#include "kiln/core/error.hpp"
#include "kiln/cuda/prelude.hpp"
#include "kiln/expr/node.hpp"

namespace kiln::cuda {

// Which loop a kernel is generated for. Contiguous: every operand and output is dense in the output's shape,
// element i of each. Strided: each operand has its own strides over the output's dims (0 where broadcast).
// index32: every index and offset fits in int (cheaper arithmetic on the GPU).
struct KernelVariant {
  bool contiguous = true;
  int rank = 0;
  bool index32 = true;

  std::string key() const {
    return kiln::detail::cat(contiguous ? "dense" : "strided", contiguous ? "" : std::to_string(rank),
                             index32 ? "_i32" : "_i64");
  }
};

// Kernel parameters are limited to 4 KiB on every architecture; larger descriptor blocks go by pointer.
inline constexpr size_t kMaxParameterBytes = 4000;

struct KernelSource {
  std::string entry;   // the extern "C" __global__ function
  std::string source;  // prelude, descriptor struct and kernel: a complete NVRTC program
  int inputs = 0;      // operand arrays: the leaves, then (backward) the incoming gradient
  int outputs = 0;
  int scalars = 0;
  KernelVariant variant;
  size_t descriptor_bytes = 0;
  bool descriptor_by_pointer = false;
  // Kernels that cooperate within a block (shared memory, __syncthreads) need exactly block_threads threads
  // and shared_bytes of dynamic shared memory; 0 for the grid-stride kernels, which take any block size.
  int block_threads = 0;
  size_t shared_bytes = 0;
};

namespace detail {

using kiln::detail::cat;

// C++ spelling of the type kiln computes T in, and of the type it is stored as.
template <class T>
constexpr std::string_view compute_name() {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, float>) return "float";
  else if constexpr (std::is_same_v<C, double>) return "double";
  else if constexpr (std::is_same_v<C, int32_t>) return "int";
  else if constexpr (std::is_same_v<C, int64_t>) return "long long";
  else return "bool";
}
template <class T>
constexpr std::string_view storage_name() {
  if constexpr (is_half_v<T>) return "unsigned short";
  else return compute_name<T>();
}
template <class T>
std::string load_element(const std::string& array, const std::string& offset) {
  const std::string raw = cat("((const ", storage_name<T>(), "*)", array, ")[", offset, "]");
  if constexpr (std::is_same_v<T, bfloat16>) return cat("kiln_bf16_to_float(", raw, ")");
  else if constexpr (std::is_same_v<T, float16>) return cat("kiln_half_to_float(", raw, ")");
  else return raw;
}
template <class T>
std::string store_element(const std::string& array, const std::string& offset, const std::string& value) {
  const std::string target = cat("((", storage_name<T>(), "*)", array, ")[", offset, "]");
  if constexpr (std::is_same_v<T, bfloat16>) return cat(target, " = kiln_float_to_bf16(", value, ");");
  else if constexpr (std::is_same_v<T, float16>) return cat(target, " = kiln_float_to_half(", value, ");");
  else return cat(target, " = ", value, ";");
}

// A constant of a derivative as a literal of its compute type (hexadecimal floats are exact).
template <class T>
std::string literal(compute_t<T> v) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<C>) {
    check<std::logic_error>(std::isfinite(v), "kiln::cuda: a derivative constant is not finite: ", v);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", double(v));
    return cat("((", compute_name<T>(), ")", buf, ")");
  } else {
    // -2^63 has no literal of its own.
    if (v == std::numeric_limits<C>::min()) return cat("(", v + 1, " - 1)");
    return cat("((", compute_name<T>(), ")", v, "LL)");
  }
}

// Replaces $0, $1... in an op's source with its operands.
inline std::string substitute(std::string_view pattern, const std::vector<std::string>& operands) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '$' && i + 1 < pattern.size() && pattern[i + 1] >= '0' && pattern[i + 1] <= '9') {
      const size_t k = size_t(pattern[++i] - '0');
      check<std::logic_error>(k < operands.size(), "kiln::cuda: op source \"", pattern, "\" names operand $", k,
                              " of ", operands.size());
      out += operands[k];
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// The local variable that holds a tape value in generated source (the placeholders of a derivative).
struct SourceName {
  std::string name;
};

// The variables of a node's tape: its value and its children's.
struct TapeVars {
  std::string var;
  std::vector<TapeVars> children;
};

// Statement writer. Leaves, scalars and variables are numbered in the order the tree visits them
// (the leaf order of for_each_leaf, which the descriptor builders follow).
struct Emitter {
  bool dense = true;  // every array at element i
  int rank = 0;       // otherwise: coordinates c0.. that the operands' offsets use
  int out_rank = 0;   // and those the outputs' offsets use (fewer in a reduction)
  std::string body;
  int leaves = 0;
  int scalars = 0;
  int vars = 0;
  bool scalars_are_literals = false;  // inside a derivative: Scalar nodes are constants
  int lane = -1;  // in the dense loop's vectorized form, the lane (0..3) of group i4 being emitted: leaves are read
                  // from one 16-byte load per group (made in lane 0)

  void line(const std::string& s) { body += "    " + s + "\n"; }
  // Offsets of operand j and output j at the loop's element: i, or the coordinates c0.. times the array's
  // strides, computed where they are used so few offsets are live at once.
  std::string in_offset(int j) const { return offset("stride", j, rank); }
  std::string out_offset(int j) const { return offset("out_stride", j, out_rank); }
  std::string offset(std::string_view strides, int j, int dims) const {
    if (dense) return "i";
    std::string sum = "0";
    for (int dim = 0; dim < dims; ++dim) sum += cat(" + c", dim, " * (kiln_index)d.", strides, "[", j, "][", dim, "]");
    return "(" + sum + ")";
  }
  // The loop variant's coordinates: the dense loop has none.
  void set_loop(const KernelVariant& v) {
    dense = v.contiguous;
    rank = out_rank = dense ? 0 : v.rank;
  }
  std::string define(std::string_view type, const std::string& value) {
    const std::string v = cat("v", vars++);
    line(cat("const ", type, " ", v, " = ", value, ";"));
    return v;
  }
};

template <class Op>
inline constexpr bool is_cast = false;
template <class U>
inline constexpr bool is_cast<ops::Cast<U>> = true;

// Leaves per group of loads: ptxas schedules all of a kernel's loads (and their offsets) first when it may,
// and a 64-leaf strided kernel then spills 1.5 KB; fenced into groups of 8 it does not.
inline constexpr int kLeavesPerLoadGroup = 8;

// The vectorized form's element types: 4 bytes, read and written as the bits of a kiln_u32x4 lane.
template <class T>
inline constexpr bool kVectorLane = std::is_same_v<T, float> || std::is_same_v<T, int32_t>;
template <class T>
std::string from_lane_bits(const std::string& bits) {
  if constexpr (std::is_same_v<T, float>) return cat("__uint_as_float(", bits, ")");
  else return cat("(int)", bits);
}
template <class T>
std::string to_lane_bits(const std::string& value) {
  if constexpr (std::is_same_v<T, float>) return cat("__float_as_uint(", value, ")");
  else return cat("(unsigned)(", value, ")");
}

template <class T>
TapeVars emit(const Leaf<T>&, Emitter& em) {
  const int k = em.leaves++;
  if (k > 0 && k % kLeavesPerLoadGroup == 0) em.line("KILN_LOAD_FENCE();");
  if constexpr (kVectorLane<T>) {
    if (em.lane >= 0) {
      if (em.lane == 0) em.line(cat("const kiln_u32x4 q", k, " = ((const kiln_u32x4*)d.in[", k, "])[i4];"));
      return {em.define(compute_name<T>(), from_lane_bits<T>(cat("q", k, ".", "xyzw"[em.lane]))), {}};
    }
  }
  return {em.define(compute_name<T>(), load_element<T>(cat("d.in[", k, "]"), em.in_offset(k))), {}};
}
template <class T>
TapeVars emit(const Scalar<T>& s, Emitter& em) {
  if (em.scalars_are_literals) return {literal<T>(s.value), {}};
  const int k = em.scalars++;
  const std::string word = cat("d.scalar[", k, "]");
  if constexpr (std::is_floating_point_v<compute_t<T>>)
    return {em.define(compute_name<T>(), cat("(", compute_name<T>(), ")", word, ".f")), {}};
  else if constexpr (std::is_same_v<T, bool>)
    return {em.define("bool", cat("(", word, ".i != 0)")), {}};
  else
    return {em.define(compute_name<T>(), cat("(", compute_name<T>(), ")", word, ".i")), {}};
}
template <class T>
TapeVars emit(const Value<SourceName, T>& v, Emitter&) {
  return {v.value.name, {}};
}
template <class Op, class... A>
TapeVars emit(const Map<Op, A...>& m, Emitter& em) {
  TapeVars node;
  apply_args(m.args, [&](const auto&... a) { (node.children.push_back(emit(a, em)), ...); });
  std::vector<std::string> operands;
  for (const TapeVars& c : node.children) operands.push_back(c.var);
  using R = typename Map<Op, A...>::value_type;
  std::string value;
  if constexpr (is_cast<Op>)
    value = cat("kiln_cast<", compute_name<R>(), ">(", operands[0], ")");
  else
    value = cat("(", compute_name<R>(), ")(", substitute(Op::cuda, operands), ")");
  node.var = em.define(compute_name<R>(), value);
  return node;
}

template <class E>
inline constexpr int leaves_of = tree_traits<E>::leaves;

// The reverse sweep. `out_slot[i]` is the output that leaf i's gradient goes to (-1: none). An output the host
// passes as null is not stored (a leaf that needs no gradient in this call: the same branch for every thread).
template <int I, class T>
void emit_backward(const Leaf<T>&, const TapeVars&, const std::string& adjoint, const std::vector<int>& out_slot,
                   Emitter& em) {
  if (out_slot[I] >= 0)
    em.line(cat("if (d.out[", out_slot[I], "]) ",
                store_element<T>(cat("d.out[", out_slot[I], "]"), em.out_offset(out_slot[I]), adjoint)));
}
template <int I, class T>
void emit_backward(const Scalar<T>&, const TapeVars&, const std::string&, const std::vector<int>&, Emitter&) {}
template <int I, class Op, class... A>
void emit_backward(const Map<Op, A...>& m, const TapeVars& tape, const std::string& adjoint,
                   const std::vector<int>& out_slot, Emitter& em) {
  if constexpr (ops::is_differentiable<Op>()) {
    using R = typename Map<Op, A...>::value_type;
    auto grads = [&]<size_t... K>(std::index_sequence<K...>) {
      auto g = Op::grad(Value<SourceName, compute_t<typename A::value_type>>(SourceName{tape.children[K].var})...,
                        Value<SourceName, compute_t<R>>(SourceName{tape.var}),
                        Value<SourceName, compute_t<R>>(SourceName{adjoint}));
      if constexpr (sizeof...(K) == 1) return std::make_tuple(g);
      else return g;
    }(std::index_sequence_for<A...>{});
    [&]<size_t... K>(std::index_sequence<K...>) {
      auto child = [&](auto k_constant) {
        constexpr size_t k = decltype(k_constant)::value;
        using Child = std::tuple_element_t<k, std::tuple<A...>>;
        using G = std::remove_cvref_t<std::tuple_element_t<k, decltype(grads)>>;
        constexpr int first = I + leaf_offset<k, A...>();
        if constexpr (!std::is_same_v<G, NoGrad>) {
          bool wanted = false;
          for (int i = first; i < first + leaves_of<Child>; ++i) wanted = wanted || out_slot[size_t(i)] >= 0;
          if (!wanted) return;
          em.scalars_are_literals = true;
          const TapeVars g = emit(std::get<k>(grads), em);
          em.scalars_are_literals = false;
          // The adjoint takes the child's type (they differ across a cast).
          using C = typename Child::value_type;
          const std::string a = em.define(compute_name<C>(), cat("(", compute_name<C>(), ")(", g.var, ")"));
          emit_backward<first>(arg<k>(m.args), tape.children[k], a, out_slot, em);
        }
      };
      (child(std::integral_constant<size_t, K>{}), ...);
    }(std::index_sequence_for<A...>{});
  }
}

// A field of a descriptor struct: its declaration and its size in 8-byte words (a field of 0 words is left out).
struct Field {
  std::string decl;
  size_t words;
};

// The complete program: prelude, `helpers` (more device functions, such as cuda/mma.hpp's), the descriptor struct of
// `fields`, and the kernel `k.entry` around `loop` (which reads the block as `d`).
inline void assemble(KernelSource& k, const std::vector<Field>& fields, const std::string& loop,
                     std::string_view helpers = {}) {
  k.descriptor_bytes = 0;
  for (const Field& f : fields) k.descriptor_bytes += 8 * f.words;
  k.descriptor_by_pointer = k.descriptor_bytes > kMaxParameterBytes;
  const std::string desc = k.entry + "_desc";
  std::string s(kPrelude);
  s += helpers;
  s += cat("struct ", desc, " {\n");
  for (const Field& f : fields)
    if (f.words > 0) s += "  " + f.decl + ";\n";
  s += "};\n";
  s += cat("extern \"C\" __global__ void ", k.entry, "(",
           k.descriptor_by_pointer ? cat("const ", desc, "* __restrict__ dp) {\n  const ", desc, "& d = *dp;\n")
                                   : cat("const ", desc, " d) {\n"));
  s += cat("  typedef ", k.variant.index32 ? "int" : "long long", " kiln_index;\n");
  s += loop;
  s += "}\n";
  k.source = std::move(s);
}

// The grid-stride loop over `var` < `count`, with `body` inside.
inline std::string grid_stride_loop(std::string_view var, std::string_view count, const std::string& body) {
  return cat("  for (kiln_index ", var, " = (kiln_index)blockIdx.x * (kiln_index)blockDim.x + (kiln_index)threadIdx.x; ",
             var, " < (kiln_index)", count, "; ", var, " += (kiln_index)blockDim.x * (kiln_index)gridDim.x) {\n", body,
             "  }\n");
}

// Coordinates c<first>..c<first + dims - 1> of the linear index `var` over the sizes d.<sizes>[0..dims),
// innermost dim first.
inline std::string coordinates(std::string_view var, int first, int dims, std::string_view sizes) {
  if (dims == 0) return "";
  std::string s = cat("    kiln_index rest_", var, " = ", var, ";\n");
  for (int dim = dims - 1; dim > 0; --dim)
    s += cat("    const kiln_index c", first + dim, " = rest_", var, " % (kiln_index)d.", sizes, "[", dim, "];\n    rest_",
             var, " /= (kiln_index)d.", sizes, "[", dim, "];\n");
  return s + cat("    const kiln_index c", first, " = rest_", var, ";\n");
}

inline std::string vectorized_loops(int inputs, int outputs, const std::string& vector_body, const std::string& body) {
  std::string addresses = "0ull";
  for (int k = 0; k < inputs; ++k) addresses += cat(" | (unsigned long long)d.in[", k, "]");
  for (int k = 0; k < outputs; ++k) addresses += cat(" | (unsigned long long)d.out[", k, "]");
  const std::string first = "(kiln_index)blockIdx.x * (kiln_index)blockDim.x + (kiln_index)threadIdx.x";
  const std::string step = "(kiln_index)blockDim.x * (kiln_index)gridDim.x";
  return cat("  const bool kiln_vectors = ((", addresses, ") & 15ull) == 0;\n",
             "  const kiln_index kiln_groups = kiln_vectors ? (kiln_index)(d.n / 4) : 0;\n",
             "  for (kiln_index i4 = ", first, "; i4 < kiln_groups; i4 += ", step, ") {\n", vector_body, "  }\n",
             "  for (kiln_index i = 4 * kiln_groups + ", first, "; i < (kiln_index)d.n; i += ", step, ") {\n", body, "  }\n");
}

// An elementwise kernel: one grid-stride loop over the output's elements. With a `vector_body` (the dense loop's
// vectorized form: group i4 is elements 4 i4 .. 4 i4 + 3), when every array is 16-byte aligned the groups run first
// and `body` takes the elements past the last whole group; otherwise `body` takes every element. (The test is the
// same for every thread: no divergence.)
inline KernelSource assemble_elementwise(std::string entry, const std::string& body, int inputs, int outputs, int scalars,
                                         const KernelVariant& v, const std::string& vector_body = "") {
  KernelSource k;
  k.entry = std::move(entry);
  k.inputs = inputs;
  k.outputs = outputs;
  k.scalars = scalars;
  k.variant = v;
  const size_t r = v.contiguous ? 0 : size_t(v.rank);
  const size_t in = size_t(inputs), out = size_t(outputs);
  assemble(k,
           {{"long long n", 1},
            {cat("long long size[", r, "]"), r},
            {cat("void* out[", out, "]"), out},
            {cat("long long out_stride[", out, "][", r, "]"), out * r},
            {cat("const void* in[", in, "]"), in},
            {cat("long long stride[", in, "][", r, "]"), in * r},
            {cat("kiln_scalar scalar[", scalars, "]"), size_t(scalars)}},
           vector_body.empty() ? grid_stride_loop("i", "d.n", coordinates("i", 0, int(r), "size") + body)
                               : vectorized_loops(inputs, outputs, vector_body, body));
  return k;
}

// The dense loop's vectorized form of out[k] = e_k (empty where it does not apply: a strided loop, an array of other
// than float or int32 elements, or more leaves than one load group, whose four lanes each would hold too many
// registers): the tree emitted once per lane, every lane's values computed before the outputs' 16-byte stores (an
// output may be a leaf).
template <Expression... E>
std::string vector_body(const KernelVariant& v, const E&... e) {
  bool lanes_fit = v.contiguous && (kVectorLane<typename E::value_type> && ...);
  int leaves = 0;
  const auto visit = [&](const auto& leaf) {
    lanes_fit = lanes_fit && kVectorLane<typename std::remove_cvref_t<decltype(leaf)>::value_type>;
    ++leaves;
  };
  (for_each_leaf(e, visit), ...);
  if (!lanes_fit || leaves > kLeavesPerLoadGroup) return "";
  Emitter em;
  em.set_loop(v);
  std::vector<std::vector<std::string>> lanes;
  for (int lane = 0; lane < 4; ++lane) {
    em.lane = lane;
    em.leaves = em.scalars = 0;  // (each lane numbers the same leaves and scalars)
    lanes.push_back({emit(e, em).var...});
  }
  int k = 0;
  const auto store = [&]<class T>(const T*) {
    std::string words;
    for (int lane = 0; lane < 4; ++lane) words += (lane ? ", " : "") + to_lane_bits<T>(lanes[size_t(lane)][size_t(k)]);
    em.line(cat("((kiln_u32x4*)d.out[", k, "])[i4] = kiln_u32x4{", words, "};"));
    ++k;
  };
  (store(static_cast<const typename E::value_type*>(nullptr)), ...);
  return em.body;
}

}  // namespace detail

// The forward kernel of several expressions over one shape, out[k] = e_k in one pass (kiln::eval_all's, which
// the optimizers' updates use). Their leaves are numbered across the trees in order; every value is computed
// before any is stored, so an output may also be a leaf (read at the same element).
template <Expression... E>
KernelSource forward_kernel_all(const KernelVariant& v, std::string entry, const E&... e) {
  detail::Emitter em;
  em.set_loop(v);
  const std::vector<std::string> roots = {detail::emit(e, em).var...};
  int k = 0;
  ((em.line(detail::store_element<typename E::value_type>(detail::cat("d.out[", k, "]"), em.out_offset(k),
                                                          roots[size_t(k)])),
    ++k),
   ...);
  return detail::assemble_elementwise(std::move(entry), em.body, em.leaves, int(sizeof...(E)), em.scalars, v,
                                      detail::vector_body(v, e...));
}

// The forward kernel of e: out[0] = e.
template <Expression E>
KernelSource forward_kernel(const E& e, const KernelVariant& v, std::string entry = "kiln_forward") {
  return forward_kernel_all(v, std::move(entry), e);
}

// For each leaf of E (leaf order), the backward kernel's output its gradient goes to, or -1 where none flows
// (integer leaves, a where's condition...).
template <Expression E>
std::vector<int> gradient_outputs() {
  std::vector<int> slot;
  int next = 0;
  for (bool r : autograd::gradient_reaches<E>) slot.push_back(r ? next++ : -1);
  return slot;
}

// The backward kernel of e: given the incoming gradient (the last input), each leaf's gradient in e's shape
// (out[gradient_outputs<E>()[leaf]], in the leaf's dtype, skipped where the output is null; broadcast leaves are
// reduced by the caller).
template <Expression E>
KernelSource backward_kernel(const E& e, const KernelVariant& v, std::string entry = "kiln_backward") {
  detail::Emitter em;
  em.set_loop(v);
  const detail::TapeVars root = detail::emit(e, em);
  using R = typename E::value_type;
  const std::string g = em.define(detail::compute_name<R>(), detail::load_element<R>(detail::cat("d.in[", em.leaves, "]"),
                                                                                     em.in_offset(em.leaves)));
  const std::vector<int> slot = gradient_outputs<E>();
  int outputs = 0;
  for (int s : slot) outputs += s >= 0;
  detail::emit_backward<0>(e, root, g, slot, em);
  return detail::assemble_elementwise(std::move(entry), em.body, em.leaves + 1, outputs, em.scalars, v);
}

}  // namespace kiln::cuda
