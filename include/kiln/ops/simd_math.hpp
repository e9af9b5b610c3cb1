#pragma once
// TEMPORARY stand-in until the real SIMD math lands; not to be committed.
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
namespace kiln { namespace HWY_NAMESPACE { namespace math {
namespace hn = hwy::HWY_NAMESPACE;
template <class D, class V> V Exp(D d, V x) { return hn::Exp(d, x); }
template <class D, class V> V Exp2(D d, V x) { return hn::Exp(d, hn::Mul(x, hn::Set(d, 0.6931471805599453))); }
template <class D, class V> V Expm1(D d, V x) { return hn::Expm1(d, x); }
template <class D, class V> V Log(D d, V x) { return hn::Log(d, x); }
template <class D, class V> V Log2(D d, V x) { return hn::Log2(d, x); }
template <class D, class V> V Log1p(D d, V x) { return hn::Log1p(d, x); }
template <class D, class V> V Sin(D d, V x) { return hn::Sin(d, x); }
template <class D, class V> V Cos(D d, V x) { return hn::Cos(d, x); }
template <class D, class V> V Tan(D d, V x) { return hn::Div(hn::Sin(d, x), hn::Cos(d, x)); }
template <class D, class V> V Tanh(D d, V x) { return hn::Tanh(d, x); }
template <class D, class V> V Sigmoid(D d, V x) { return hn::Div(hn::Set(d, 1), hn::Add(hn::Set(d, 1), hn::Exp(d, hn::Neg(x)))); }
template <class D, class V> V Softplus(D d, V x) { return hn::Log1p(d, hn::Exp(d, x)); }
template <class D, class V> V Erf(D d, V x) { return x; }
template <class D, class V> V Pow(D d, V x, V y) { return hn::Exp(d, hn::Mul(y, hn::Log(d, x))); }
template <class T> inline constexpr bool kHasErf = false;
template <class T> inline constexpr bool kHasPow = false;
}}}
