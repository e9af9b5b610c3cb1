// flex_attention's forward against the naive float64 reference: every ready-made modifier, lengths that are
// not multiples of the tiles, GQA, fully masked rows, the block mask's tiles, float and bfloat16 tolerances,
// and the errors.
#include <doctest/doctest.h>

#include <kiln/attention.hpp>

#include "flex_reference.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_attention_flex_forward {

using namespace kiln;
using namespace kiln_test;
namespace at = kiln::attention;

namespace {

struct Case {
  int64_t B = 2, Hq = 2, Hkv = 2, Lq = 37, Lkv = 45, D = 5, Dv = 6;
};

struct Inputs {
  Tensor<double> q, k, v;
};
Inputs make_inputs(const Case& c, uint64_t seed) {
  Generator g(seed);
  return {randn<double>({c.B, c.Hq, c.Lq, c.D}, &g), randn<double>({c.B, c.Hkv, c.Lkv, c.D}, &g),
          randn<double>({c.B, c.Hkv, c.Lkv, c.Dv}, &g)};
}

// Runs flex_attention in double with 16 x 16 tiles (so 37 and 45 leave partial tail tiles) and compares the
// output and log-sum-exp with the reference.
template <class S, class M>
void expect_matches(const Case& c, const S& score_mod, const M& mask_mod, const ScoreFn& ref_score,
                    const MaskFn& ref_mask, at::FlexOptions o = {}) {
  const Inputs in = make_inputs(c, 7);
  const auto bm = at::create_block_mask(mask_mod, c.B, c.Hq, c.Lq, c.Lkv, 16, 16);
  const auto r = at::flex_attention_with_lse(in.q, in.k, in.v, score_mod, bm, o);
  const Reference ref = naive_attention(in.q, in.k, in.v, ref_score, ref_mask, o.scale.value_or(1 / std::sqrt(double(c.D))));
  CHECK(r.output.shape() == Shape{c.B, c.Hq, c.Lq, c.Dv});
  CHECK(r.lse.shape() == Shape{c.B, c.Hq, c.Lq});
  CHECK(max_abs_diff(values(r.output), ref.out) < 1e-12);
  CHECK(max_abs_diff(values(r.lse), ref.lse) < 1e-12);
}

}  // namespace

TEST_CASE("flex_attention: dense, no modifier, equals the naive softmax(q k^T / sqrt(D)) v") {
  const Case c;
  const Inputs in = make_inputs(c, 1);
  const auto r = at::flex_attention_with_lse(in.q, in.k, in.v);
  const Reference ref = naive_attention(in.q, in.k, in.v, identity_score, no_mask, 1 / std::sqrt(double(c.D)));
  CHECK(max_abs_diff(values(r.output), ref.out) < 1e-12);
  CHECK(max_abs_diff(values(r.lse), ref.lse) < 1e-12);
  // A custom scale, and a strided (transposed) input: [B, L, H, D] viewed as [B, H, L, D].
  const Tensor<double> qt = in.q.transpose(1, 2).contiguous().transpose(1, 2);
  CHECK(!qt.is_contiguous());
  const auto r2 = at::flex_attention(qt, in.k, in.v, at::NoScoreMod{}, at::FlexOptions{.scale = 0.3});
  CHECK(max_abs_diff(values(r2), naive_attention(in.q, in.k, in.v, identity_score, no_mask, 0.3).out) < 1e-12);
}

TEST_CASE("flex_attention: each ready-made mask against the reference, tails not multiples of the tiles") {
  const Case c;
  SUBCASE("causal") {
    expect_matches(c, at::NoScoreMod{}, at::causal(), identity_score, [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv; });
  }
  SUBCASE("sliding window") {
    expect_matches(c, at::NoScoreMod{}, at::sliding_window(5), identity_score,
                   [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv && q - kv < 5; });
  }
  SUBCASE("prefix LM") {
    expect_matches(c, at::NoScoreMod{}, at::prefix_lm(20), identity_score,
                   [](int64_t, int64_t, int64_t q, int64_t kv) { return kv < 20 || q >= kv; });
  }
  SUBCASE("documents, and causal within documents") {
    Case s = c;
    s.Lkv = s.Lq;
    std::vector<int64_t> ids(size_t(s.Lq));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i < 6 ? 0 : i < 23 ? 1 : 2;
    const Tensor<int64_t> doc = tensor(ids);
    const MaskFn same = [&](int64_t, int64_t, int64_t q, int64_t kv) { return ids[size_t(q)] == ids[size_t(kv)]; };
    expect_matches(s, at::NoScoreMod{}, at::document(doc), identity_score, same);
    expect_matches(s, at::NoScoreMod{}, at::document(doc) & at::causal(), identity_score,
                   [&](int64_t b, int64_t h, int64_t q, int64_t kv) { return same(b, h, q, kv) && q >= kv; });
  }
  SUBCASE("a mask that depends on b and h") {
    auto mask = [](auto b, auto h, auto q, auto kv) { return (q - kv <= b * 7.0 + h * 3.0) | (kv == 0.0); };
    expect_matches(c, at::NoScoreMod{}, mask, identity_score,
                   [](int64_t b, int64_t h, int64_t q, int64_t kv) { return q - kv <= b * 7 + h * 3 || kv == 0; });
  }
}

TEST_CASE("flex_attention: each ready-made score modifier against the reference") {
  const Case c;
  SUBCASE("ALiBi") {
    expect_matches(c, at::alibi(c.Hq), at::causal(),
                   [&](double s, int64_t, int64_t h, int64_t q, int64_t kv) {
                     return s + std::exp2(-8.0 * double(h + 1) / double(c.Hq)) * double(kv - q);
                   },
                   [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv; });
  }
  SUBCASE("relative position bias") {
    Generator g(3);
    const Tensor<double> table = randn<double>({c.Hq, c.Lq + c.Lkv - 1}, &g);
    const double* t = table.data_ptr();
    expect_matches(c, at::relative_position_bias(table, c.Lkv), at::causal(),
                   [&](double s, int64_t, int64_t h, int64_t q, int64_t kv) {
                     return s + t[h * (c.Lq + c.Lkv - 1) + q - kv + c.Lkv - 1];
                   },
                   [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv; });
  }
  SUBCASE("tanh soft-capping") {
    expect_matches(c, at::soft_cap(0.7), at::sliding_window(9),
                   [](double s, int64_t, int64_t, int64_t, int64_t) { return 0.7 * std::tanh(s / 0.7); },
                   [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv && q - kv < 9; }, {.scale = 0.9});
  }
  SUBCASE("a lambda over every placeholder, with where and abs") {
    auto mod = [](auto score, auto b, auto h, auto q, auto kv) {
      return at::where(q > kv, score * 2.0 - h, -at::abs(score) + b * 0.5) / (1.0 + (q - kv) * 0.0);
    };
    expect_matches(c, mod, at::prefix_lm(11),
                   [](double s, int64_t b, int64_t h, int64_t q, int64_t kv) {
                     return q > kv ? s * 2 - double(h) : -std::abs(s) + double(b) * 0.5;
                   },
                   [](int64_t, int64_t, int64_t q, int64_t kv) { return kv < 11 || q >= kv; });
  }
}

TEST_CASE("flex_attention: grouped-query attention, and enable_gqa required") {
  Case c;
  c.Hq = 6;
  c.Hkv = 2;
  expect_matches(c, at::alibi(c.Hq), at::causal(),
                 [&](double s, int64_t, int64_t h, int64_t q, int64_t kv) {  // alibi's slopes are float
                   return s + double(float(std::exp2(-8.0 * double(h + 1) / double(c.Hq)))) * double(kv - q);
                 },
                 [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv; }, {.enable_gqa = true});
  const Inputs in = make_inputs(c, 2);
  CHECK_THROWS_WITH_AS(at::flex_attention(in.q, in.k, in.v), doctest::Contains("need enable_gqa"), ShapeError);
  Case odd = c;
  odd.Hq = 5;
  const Inputs bad = make_inputs(odd, 2);
  CHECK_THROWS_AS(at::flex_attention(bad.q, bad.k, bad.v, at::NoScoreMod{}, {.enable_gqa = true}), ShapeError);
}

TEST_CASE("flex_attention: rows with every key masked give zeros and lse -inf, not NaN") {
  Case c;
  c.Lq = c.Lkv = 40;
  // Queries 0..9 see nothing; the others are causal.
  auto mask = [](auto, auto, auto q, auto kv) { return (q >= 10.0) & (q >= kv); };
  expect_matches(c, at::NoScoreMod{}, mask, identity_score,
                 [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= 10 && q >= kv; });
  const Inputs in = make_inputs(c, 4);
  const auto r = at::flex_attention_with_lse(in.q, in.k, in.v, at::NoScoreMod{}, at::create_block_mask(mask, 1, 1, 40, 40, 16, 16));
  const auto out = values(r.output), lse = values(r.lse);
  for (int64_t i = 0; i < 10 * c.Dv; ++i) CHECK(out[size_t(i)] == 0.0);
  CHECK(lse[0] == -std::numeric_limits<double>::infinity());
  CHECK(std::isfinite(lse[10]));
}

TEST_CASE("create_block_mask: tiles empty, partial or full as a brute force says; causal is about half") {
  const int64_t L = 100, blk = 16, n = (L + blk - 1) / blk;
  const auto bm = at::create_block_mask(at::causal(), 4, 8, L, L, blk, blk);
  CHECK(bm.B == 1);  // causal reads neither b nor h: one mask for all
  CHECK(bm.H == 1);
  for (int64_t qb = 0; qb < n; ++qb)
    for (int64_t kb = 0; kb < n; ++kb) {
      int64_t live = 0, all = 0;
      for (int64_t q = qb * blk; q < std::min(L, (qb + 1) * blk); ++q)
        for (int64_t k = kb * blk; k < std::min(L, (kb + 1) * blk); ++k) {
          live += q >= k;
          ++all;
        }
      const bool whole = (qb + 1) * blk <= L && (kb + 1) * blk <= L;
      const at::BlockState want = live == 0 ? at::BlockState::Empty
                                  : live == all && whole ? at::BlockState::Full
                                                         : at::BlockState::Partial;
      CHECK(bm.at(3, 5, qb, kb) == want);
    }
  const auto big = at::create_block_mask(at::causal(), 1, 1, 4096, 4096);
  CHECK(big.density() == doctest::Approx(0.5 + 0.5 / 32));
  const auto by_head = at::create_block_mask([](auto, auto h, auto q, auto kv) { return q - kv >= h * 20.0; }, 2, 3, L, L, blk, blk);
  CHECK(by_head.B == 1);
  CHECK(by_head.H == 3);
  CHECK(by_head.at(0, 0, 0, 0) == at::BlockState::Partial);
  CHECK(by_head.at(0, 2, 0, 0) == at::BlockState::Empty);
}

TEST_CASE("flex_attention: float and bfloat16 against the float64 reference, within stated tolerances") {
  const Case c;
  const Inputs in = make_inputs(c, 5);
  const auto bm = at::create_block_mask(at::causal(), 1, 1, c.Lq, c.Lkv, 16, 16);
  const MaskFn causal_ref = [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv; };
  const auto sm = at::soft_cap(2.0);
  const ScoreFn sm_ref = [](double s, int64_t, int64_t, int64_t, int64_t) { return 2 * std::tanh(s / 2); };
  // float: inputs exactly representable, so the difference is the kernel's float arithmetic.
  const Tensor<float> qf = in.q.to<float>(), kf = in.k.to<float>(), vf = in.v.to<float>();
  const Reference rf = naive_attention(qf, kf, vf, sm_ref, causal_ref, 1 / std::sqrt(5.0));
  CHECK(max_abs_diff(values(at::flex_attention(qf, kf, vf, sm, bm)), rf.out) < 2e-6);
  // bfloat16: inputs rounded to bf16 first; float accumulation, the output rounded once to 8 significant
  // bits (a relative error up to 2^-9; 2^-8 allowed).
  const Tensor<bfloat16> qb = in.q.to<bfloat16>(), kb = in.k.to<bfloat16>(), vb = in.v.to<bfloat16>();
  const Reference rb = naive_attention(qb, kb, vb, sm_ref, causal_ref, 1 / std::sqrt(5.0));
  const auto rbf = at::flex_attention_with_lse(qb, kb, vb, sm, bm);
  CHECK(within(values(rbf.output), rb.out, 0x1p-8, 1e-5));
  CHECK(max_abs_diff(values(rbf.lse), rb.lse) < 1e-5);
}

TEST_CASE("flex_attention: bad input is refused with the op and the shapes") {
  const Case c;
  const Inputs in = make_inputs(c, 6);
  CHECK_THROWS_WITH_AS(at::flex_attention(in.q, in.k.narrow(3, 0, 4), in.v), doctest::Contains("do not fit"), ShapeError);
  CHECK_THROWS_WITH_AS(at::flex_attention(in.q.view({c.B * c.Hq, c.Lq, c.D}), in.k, in.v),
                       doctest::Contains("expected 4-d"), ShapeError);
  const auto wrong = at::create_block_mask(at::causal(), 1, 1, c.Lq + 1, c.Lkv);
  CHECK_THROWS_WITH_AS(at::flex_attention(in.q, in.k, in.v, at::NoScoreMod{}, wrong), doctest::Contains("block mask"), ShapeError);
  // A bias table too small for the relative positions it is read at: an error, not a read out of bounds.
  const Tensor<double> small = zeros<double>({c.Hq, 3});
  CHECK_THROWS_WITH_AS(at::flex_attention(in.q, in.k, in.v, at::relative_position_bias(small, c.Lkv)),
                       doctest::Contains("out of its bounds"), std::out_of_range);
  // ... but reads outside the table are allowed where the mask hides them: bias[h][q - kv] under causal.
  const Tensor<double> table = randn<double>({c.Hq, c.Lq});
  auto mod = [&](auto s, auto, auto h, auto q, auto kv) { return s + at::captured(table)(h, q - kv); };
  const double* t = table.data_ptr();
  expect_matches(c, mod, at::causal(), [&](double s, int64_t, int64_t h, int64_t q, int64_t kv) { return s + t[h * c.Lq + q - kv]; },
                 [](int64_t, int64_t, int64_t q, int64_t kv) { return q >= kv; });
  CHECK_THROWS_AS(at::create_block_mask(at::causal(), 0, 1, 4, 4), std::invalid_argument);
  CHECK_THROWS_AS(at::sliding_window(0), std::invalid_argument);
}

// Modifiers compute in float for float inputs (and block masks always do): integers past 2^24 are not exact there
// (16777217 reads as 16777216). Found by a review: document ids 16777216 and 16777217 made one document, and a
// bias read at q * 4096 + kv past 2^24 read its neighbour, silently. Both are refused now; so is a fractional index,
// which was truncated.
TEST_CASE("flex_attention: indices and captured integers that the compute type cannot hold exactly are refused") {
  const Tensor<int64_t> ids = tensor<int64_t>({16777216, 16777216, 16777217, 16777217});
  CHECK_THROWS_WITH_AS(at::create_block_mask(at::document(ids), 1, 1, 4, 4, 1, 1),
                       doctest::Contains("holds 16777217, past 2^24"), std::invalid_argument);
  const Tensor<int64_t> small_ids = tensor<int64_t>({16777215, 16777215, 16777216, 16777216});  // up to 2^24: exact
  CHECK(at::create_block_mask(at::document(small_ids), 1, 1, 4, 4, 1, 1).density() == doctest::Approx(0.5));

  const Tensor<float> q = zeros<float>({1, 1, 4, 8}), k = zeros<float>({1, 1, 4, 8}), v = randn<float>({1, 1, 4, 8});
  const Tensor<float> long_table = zeros<float>({(int64_t(1) << 24) + 1});
  auto long_read = [&](auto s, auto, auto, auto, auto kv) { return s + at::captured(long_table)(kv); };
  CHECK_THROWS_WITH_AS(at::flex_attention(q, k, v, long_read), doctest::Contains("has a dim past 2^24"),
                       std::invalid_argument);
  // In double the same table is fine.
  const Tensor<double> long_double = zeros<double>({(int64_t(1) << 24) + 1});
  auto long_read_double = [&](auto s, auto, auto, auto, auto kv) { return s + at::captured(long_double)(kv); };
  CHECK_NOTHROW(at::flex_attention(q.to<double>(), k.to<double>(), v.to<double>(), long_read_double));

  const Tensor<float> table = zeros<float>({8});
  auto half_index = [&](auto s, auto, auto, auto, auto kv) { return s + at::captured(table)(kv * 0.5); };
  CHECK_THROWS_WITH_AS(at::flex_attention(q, k, v, half_index), doctest::Contains("fractional index"),
                       std::out_of_range);
}

}  // namespace test_attention_flex_forward
