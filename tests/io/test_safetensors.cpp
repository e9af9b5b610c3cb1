// safetensors: round trips of every dtype and of views, byte-for-byte agreement with Python's safetensors, the
// JSON header's syntax, and one exact error for each way a file can be malformed.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "io_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_io_safetensors {

using namespace kiln;
using kiln::test::bytes_of;
using kiln::test::concat;

namespace {

// A safetensors file: the 8-byte length of `header`, `header` as it is, then `data`.
io::Bytes with_header(std::string_view header, const io::Bytes& data = {}) {
  io::Bytes out(8);
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  return concat(concat(out, bytes_of(header)), data);
}

// The message of the io::FormatError that parsing `bytes` throws ("" when it does not throw).
std::string error_of(const io::Bytes& bytes) {
  try {
    io::parse_safetensors(bytes);
  } catch (const io::FormatError& e) {
    return e.what();
  }
  return "";
}

std::string tensor_json(std::string_view dtype, std::string_view shape, std::string_view offsets) {
  return detail::cat("{\"dtype\":\"", dtype, "\",\"shape\":", shape, ",\"data_offsets\":", offsets, "}");
}

}  // namespace

TEST_CASE("safetensors: every dtype, views, 0-d and empty tensors and metadata survive a round trip") {
  const Tensor<float> grid = arange(12).reshape({3, 4});
  std::map<std::string, AnyTensor> tensors = test::reference_tensors();
  tensors["transposed"] = grid.t();                                            // strides [1, 4]
  tensors["column"] = arange<int64_t>(12).reshape({3, 4}).select(1, 2);        // stride 4
  tensors["every_other"] = arange<double>(10).slice(0, 1, 10, 2);              // offset 1, stride 2
  tensors["broadcast"] = tensor<bool>({true, false, true}).reshape({3, 1}).expand({3, 4});  // stride 0
  tensors["bf16_view"] = grid.to<bfloat16>().transpose(0, 1).slice(0, 1, 3);
  tensors["int_scalar"] = full<int32_t>({}, -5);
  tensors["empty3d"] = empty<int32_t>({2, 0, 3});
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"quote\"back\\slash", "tab\tnewline\ncontrol\x01 \xc3\xa9\xf0\x9f\x98\x80"}, {"", ""}};

  const io::Bytes bytes = io::serialize_safetensors(tensors, metadata);
  const io::SafetensorsFile parsed = io::parse_safetensors(bytes);
  CHECK(test::same_tensors(parsed.tensors, tensors));
  CHECK(parsed.metadata == metadata);
  // Empty ones aside: TensorImpl::is_contiguous() says false for a fresh [2, 0, 3] tensor.
  for (const auto& [name, t] : parsed.tensors) CHECK((t.numel() == 0 || t.is_contiguous()));
  CHECK(parsed.tensors.at("transposed").shape() == Shape{4, 3});
  CHECK(parsed.tensors.at("transposed").as<float>()[0][1].item() == 4.0f);
  CHECK(parsed.tensors.at("broadcast").as<bool>().to_vector() ==
        std::vector<bool>{true, true, true, true, false, false, false, false, true, true, true, true});

  // The header is padded with spaces to a multiple of 8, so the data starts 8-aligned.
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | bytes[i];
  CHECK(header_size % 8 == 0);
  CHECK(bytes[8 + header_size - 1] == ' ');

  // Through a file: the same tensors.
  test::ScratchDir dir;
  io::save_safetensors(dir / "m.safetensors", tensors, metadata);
  CHECK(io::read_file(dir / "m.safetensors") == bytes);
  CHECK(test::same_tensors(io::load_safetensors(dir / "m.safetensors"), tensors));
  CHECK(io::read_safetensors(dir / "m.safetensors").metadata == metadata);
}

TEST_CASE("safetensors: kiln writes the bytes Python's safetensors writes, and reads its files") {
  const io::Bytes python = io::read_file(test::io_data("reference.safetensors"));
  CHECK(io::serialize_safetensors(test::reference_tensors(), test::kReferenceMetadata) == python);
  const io::SafetensorsFile file = io::read_safetensors(test::io_data("reference.safetensors"));
  CHECK(test::same_tensors(file.tensors, test::reference_tensors()));
  CHECK(file.metadata == test::kReferenceMetadata);
  CHECK(file.tensors.at("i64").as<int64_t>()[1][2].item() == INT64_MAX);
  CHECK(float(file.tensors.at("bf16").as<bfloat16>()[2].item()) == 3.140625f);

  // No tensors and no metadata: "{}" padded to 8 bytes, as Python writes it.
  CHECK(io::serialize_safetensors({}) == with_header("{}      "));
  CHECK(io::parse_safetensors(with_header("{}      ")).tensors.empty());
}

// The other direction: with KILN_INTEROP_DIR set, this writes the files scripts/safetensors_interop.py check reads.
TEST_CASE("safetensors and npy: files for Python to check (KILN_INTEROP_DIR)") {
  const char* dir = std::getenv("KILN_INTEROP_DIR");
  if (!dir) return;
  std::filesystem::create_directories(dir);
  std::map<std::string, AnyTensor> tensors = test::reference_tensors();
  tensors["f32"] = tensors["f32"].as<float>().t().contiguous().t();  // a view, written as a contiguous copy
  io::save_safetensors(std::filesystem::path(dir) / "kiln.safetensors", tensors, test::kReferenceMetadata);
  io::save_npy(std::filesystem::path(dir) / "kiln.npy", arange<int64_t>(12).reshape({3, 4}).t());
  MESSAGE((std::string("wrote kiln.safetensors and kiln.npy into ") + dir));
}

TEST_CASE("safetensors: the JSON header: escapes, unicode, whitespace, tensors at odd offsets") {
  // Every escape, a surrogate pair, whitespace between all tokens.
  const std::string header =
      " {\n \"__metadata__\" : { \"\\u00e9\\ud83d\\ude00\" : \"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000\" } ,\r\n"
      "\t\"m\" : " + tensor_json("BOOL", "[ 3 ]", "[ 0 , 3 ]") + ", \"x\":" + tensor_json("F32", "[1]", "[3,7]") + " }  ";
  const io::Bytes data = {1, 0, 1, 0x00, 0x00, 0xc0, 0x3f};  // a float at byte 3: read without alignment
  const io::SafetensorsFile file = io::parse_safetensors(with_header(header, data));
  CHECK(file.metadata.at("\xc3\xa9\xf0\x9f\x98\x80") == std::string("a\"\\/\b\f\n\r\t\0", 10));
  CHECK(file.tensors.at("m").as<bool>().to_vector() == std::vector<bool>{true, false, true});
  CHECK(file.tensors.at("x").as<float>()[0].item() == 1.5f);

  // Zero-size tensors take no bytes and may sit anywhere a tensor may start.
  const io::SafetensorsFile empties = io::parse_safetensors(with_header(
      "{\"a\":" + tensor_json("F64", "[0]", "[0,0]") + ",\"b\":" + tensor_json("I32", "[1]", "[0,4]") +
          ",\"c\":" + tensor_json("I64", "[2,0]", "[4,4]") + "}",
      {1, 0, 0, 0}));
  CHECK(empties.tensors.at("c").shape() == Shape{2, 0});
  CHECK(empties.tensors.at("b").as<int32_t>()[0].item() == 1);
}

TEST_CASE("safetensors: each malformed file gets its own error") {
  const io::Bytes f32x2(8, 0);
  const std::string a = "{\"a\":" + tensor_json("F32", "[2]", "[0,8]");
  struct Case {
    io::Bytes bytes;
    std::string message;
  };
  const std::vector<Case> cases = {
      // The length prefix.
      {io::Bytes(5, 0), "5 bytes is too short for the 8-byte header length"},
      {io::Bytes{100, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '},
       "header length 100 runs past the end (4 bytes follow the length)"},
      {io::Bytes{0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0}, "header length 100000001 is over the limit of 100000000 bytes"},
      {io::Bytes{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'},
       "header length 18446744073709551615 is over the limit of 100000000 bytes"},
      // JSON syntax.
      {with_header(""), "header byte 0: expected '{', found the end of the header"},
      {with_header("[]"), "header byte 0: expected '{', found '['"},
      {with_header("{\"a\" {}}"), "header byte 5: expected ':', found '{'"},
      {with_header("{\"__metadata__\":{\"k\":\"v\",}}"), "header byte 25: expected a string, found '}'"},
      {with_header("{\"__metadata__\":{\"k\":\"v\"}"), "header byte 25: expected ',' or '}', found the end of the header"},
      {with_header("{\"__metadata__\":{\"k\":true}}"), "header byte 21: expected a string, found 't'"},
      {with_header("{\"__metadata__\":{\"k\":\"v}}"), "header byte 25: unterminated string"},
      {with_header("{\"__metadata__\":{\"k\":\"\\q\"}}"), "header byte 23: invalid escape '\\q' in a string"},
      {with_header("{\"__metadata__\":{\"k\":\"\\u12g4\"}}"), "header byte 26: expected 4 hex digits after \\u"},
      {with_header("{\"__metadata__\":{\"k\":\"\\udc00\"}}"), "header byte 28: lone low surrogate in a \\u escape"},
      {with_header("{\"__metadata__\":{\"k\":\"\\ud800x\"}}"),
       "header byte 28: high surrogate not followed by a \\u escape"},
      {with_header("{\"__metadata__\":{\"k\":\"\\ud800\\u0041\"}}"),
       "header byte 34: high surrogate not followed by a low surrogate"},
      {with_header("{\"__metadata__\":{\"k\":\"\xff\"}}"), "header byte 24: string is not valid UTF-8"},
      {with_header("{\"__metadata__\":{\"k\":\"\xc0\x80\"}}"), "header byte 25: string is not valid UTF-8"},  // overlong
      {with_header("{\"__metadata__\":{\"k\":\"a\nb\"}}"), "header byte 23: unescaped control character in a string"},
      {with_header("{} x"), "header byte 3: expected the end of the header, found 'x'"},
      {with_header("{}\x01"), "header byte 2: expected the end of the header, found byte 0x01"},
      {with_header("{\"t\":" + tensor_json("F32", "[1.5]", "[0,4]") + "}", io::Bytes(4, 0)),
       "header byte 30: expected an integer, found a number with a fraction or an exponent"},
      {with_header("{\"t\":" + tensor_json("F32", "[1e3]", "[0,4]") + "}", io::Bytes(4, 0)),
       "header byte 30: expected an integer, found a number with a fraction or an exponent"},
      {with_header("{\"t\":" + tensor_json("F32", "[01]", "[0,4]") + "}", io::Bytes(4, 0)),
       "header byte 29: integer with a leading zero"},
      {with_header("{\"t\":" + tensor_json("F32", "[-]", "[0,4]") + "}", io::Bytes(4, 0)),
       "header byte 30: expected an integer, found ']'"},
      {with_header("{\"t\":" + tensor_json("F32", "[99999999999999999999]", "[0,4]") + "}", io::Bytes(4, 0)),
       "header byte 47: integer out of the int64 range"},
      {with_header("{\"t\":" + tensor_json("F32", "[1 2]", "[0,4]") + "}", io::Bytes(4, 0)),
       "header byte 31: expected ',' or ']', found '2'"},
      // Keys.
      {with_header(a + ",\"a\":" + tensor_json("F32", "[2]", "[0,8]") + "}", f32x2), "header byte 57: duplicate key \"a\""},
      {with_header("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"), "header byte 28: duplicate key \"k\""},
      {with_header("{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}"), "header byte 27: duplicate key \"dtype\""},
      {with_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],\"x\":1}}", io::Bytes(4, 0)),
       "header byte 56: tensor \"t\": unknown field \"x\""},
      {with_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[]}}"), "tensor \"t\": no \"data_offsets\""},
      {with_header("{\"t\":{\"shape\":[],\"data_offsets\":[0,4]}}", io::Bytes(4, 0)), "tensor \"t\": no \"dtype\""},
      {with_header("{\"__metadata__\":[]}"), "header byte 16: expected '{', found '['"},
      // Tensor entries.
      {with_header("{\"t\":" + tensor_json("U16", "[2]", "[0,4]") + "}", io::Bytes(4, 0)),
       "tensor \"t\": unsupported dtype \"U16\" (kiln reads F32, F64, I32, I64, BOOL, BF16 and F16)"},
      {with_header("{\"t\":" + tensor_json("F32", "[2,-1]", "[0,0]") + "}"), "tensor \"t\": shape [2, -1] has a negative entry"},
      {with_header("{\"t\":" + tensor_json("BOOL", "[4294967296,4294967296]", "[0,0]") + "}"),
       "tensor \"t\": shape [4294967296, 4294967296] is too large (its nonzero sizes multiply past int64)"},
      {with_header("{\"t\":" + tensor_json("BOOL", "[0,4294967296,4294967296]", "[0,0]") + "}"),
       "tensor \"t\": shape [0, 4294967296, 4294967296] is too large (its nonzero sizes multiply past int64)"},
      {with_header("{\"t\":" + tensor_json("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") + "}", io::Bytes(4, 0)),
       "header byte 45: tensor \"t\": shape has more than 8 entries"},
      {with_header("{\"t\":" + tensor_json("F32", "[1]", "[0,4,8]") + "}", io::Bytes(8, 0)),
       "header byte 52: tensor \"t\": data_offsets has more than 2 entries"},
      {with_header("{\"t\":" + tensor_json("F32", "[1]", "[4]") + "}", io::Bytes(8, 0)),
       "tensor \"t\": data_offsets [4] are not [begin, end] with 0 <= begin <= end <= 8 (the data buffer's size)"},
      {with_header("{\"t\":" + tensor_json("F32", "[1]", "[8,4]") + "}", io::Bytes(8, 0)),
       "tensor \"t\": data_offsets [8, 4] are not [begin, end] with 0 <= begin <= end <= 8 (the data buffer's size)"},
      {with_header("{\"t\":" + tensor_json("F32", "[1]", "[-4,0]") + "}", io::Bytes(8, 0)),
       "tensor \"t\": data_offsets [-4, 0] are not [begin, end] with 0 <= begin <= end <= 8 (the data buffer's size)"},
      {with_header("{\"t\":" + tensor_json("F32", "[3]", "[0,12]") + "}", io::Bytes(8, 0)),
       "tensor \"t\": data_offsets [0, 12] are not [begin, end] with 0 <= begin <= end <= 8 (the data buffer's size)"},
      {with_header("{\"t\":" + tensor_json("F32", "[2,2]", "[0,12]") + "}", io::Bytes(12, 0)),
       "tensor \"t\": data_offsets [0, 12] hold 12 bytes, but F32 shape [2, 2] needs 4 elements of 4 bytes"},
      {with_header("{\"t\":" + tensor_json("I64", "[2305843009213693952,2]", "[0,8]") + "}", io::Bytes(8, 0)),
       "tensor \"t\": data_offsets [0, 8] hold 8 bytes, but I64 shape [2305843009213693952, 2] needs "
       "4611686018427387904 elements of 8 bytes"},  // 2^65 bytes: the check must not overflow
      // The layout of the data buffer.
      {with_header(a + ",\"b\":" + tensor_json("F32", "[2]", "[4,12]") + "}", io::Bytes(12, 0)),
       "tensors \"a\" (bytes [0, 8)) and \"b\" (bytes [4, 12)) overlap in the data buffer"},
      {with_header(a + ",\"e\":" + tensor_json("F32", "[0]", "[4,4]") + "}", f32x2),
       "tensors \"a\" (bytes [0, 8)) and \"e\" (bytes [4, 4)) overlap in the data buffer"},
      {with_header(a + ",\"b\":" + tensor_json("F32", "[1]", "[12,16]") + "}", io::Bytes(16, 0)),
       "bytes [8, 12) of the data buffer belong to no tensor"},
      {with_header("{\"b\":" + tensor_json("F32", "[1]", "[4,8]") + "}", f32x2),
       "bytes [0, 4) of the data buffer belong to no tensor"},
      {with_header(a + "}", io::Bytes(9, 0)), "bytes [8, 9) of the data buffer belong to no tensor"},
      {with_header("{}", io::Bytes(4, 0)), "bytes [0, 4) of the data buffer belong to no tensor"},
      // Values.
      {with_header("{\"m\":" + tensor_json("BOOL", "[3]", "[0,3]") + "}", {1, 2, 0}),
       "tensor \"m\": bool element 1 is byte 2, not 0 or 1"},
  };
  for (const Case& c : cases) {
    CAPTURE(std::string(c.bytes.begin(), c.bytes.end()));
    CHECK(error_of(c.bytes) == "safetensors buffer: " + c.message);
  }
}

TEST_CASE("safetensors: file errors name the file") {
  test::ScratchDir dir;
  CHECK_THROWS_WITH_AS(io::load_safetensors(dir / "missing.safetensors"),
                       ((dir / "missing.safetensors").string() + ": cannot open: No such file or directory").c_str(),
                       std::runtime_error);
  io::write_file_atomic(dir / "short.safetensors", io::Bytes(3, 0));
  CHECK_THROWS_WITH_AS(io::load_safetensors(dir / "short.safetensors"),
                       ((dir / "short.safetensors").string() + ": 3 bytes is too short for the 8-byte header length").c_str(),
                       io::FormatError);
}

TEST_CASE("safetensors: what the writer refuses") {
  CHECK_THROWS_WITH_AS(io::serialize_safetensors({{"w", AnyTensor()}}), "serialize_safetensors: tensor \"w\" is undefined",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(io::serialize_safetensors({{"__metadata__", AnyTensor(zeros<float>({1}))}}),
                       "serialize_safetensors: \"__metadata__\" names the metadata, it cannot name a tensor",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(io::serialize_safetensors({{"w\xff", AnyTensor(zeros<float>({1}))}}),
                       "serialize_safetensors: tensor name \"w\xff\" is not valid UTF-8", std::invalid_argument);
  CHECK_THROWS_WITH_AS(io::serialize_safetensors({}, {{"k", "\xed\xa0\x80"}}),  // an encoded surrogate
                       "serialize_safetensors: metadata value \"\xed\xa0\x80\" is not valid UTF-8", std::invalid_argument);
}

TEST_CASE("safetensors: a view of a tensor that requires grad is saved by value") {
  Tensor<float> w = arange(6).reshape({2, 3}).requires_grad_();
  const io::SafetensorsFile file = io::parse_safetensors(io::serialize_safetensors({{"w", w.t()}}));
  CHECK(file.tensors.at("w").as<float>()[2][1].item() == 5.0f);
  CHECK_FALSE(file.tensors.at("w").as<float>().requires_grad());
}

}  // namespace test_io_safetensors
