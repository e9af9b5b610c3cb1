// NumPy .npy: reading numpy's files of every supported dtype and format version, writing numpy's bytes, round
// trips of views, and one exact error for each way a file can be malformed.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "io_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_io_npy {

using namespace kiln;
using kiln::test::bytes_of;
using kiln::test::concat;

namespace {

// A version 1.0 .npy file with `header` as it is (no padding) and then `data`.
io::Bytes npy_with_header(std::string_view header, const io::Bytes& data = {}) {
  io::Bytes out = bytes_of(std::string_view("\x93NUMPY\x01\x00", 8));
  out.push_back(uint8_t(header.size()));
  out.push_back(uint8_t(header.size() >> 8));
  return concat(concat(out, bytes_of(header)), data);
}

std::string error_of(const io::Bytes& bytes) {
  try {
    io::parse_npy(bytes);
  } catch (const io::FormatError& e) {
    return e.what();
  }
  return "";
}

// The arrays scripts/safetensors_interop.py saved with numpy (write_npy), as kiln tensors.
std::map<std::string, AnyTensor> numpy_arrays() {
  const Tensor<float> f4 = tensor<float>({{-1.0f, -0.5f, 0.0f}, {0.5f, 1.0f, 1.5f}});
  return {
      {"f4", f4},
      {"f4_v2", f4},
      {"f4_v3", f4},
      {"f8", full<double>({}, 1.0 / 3)},
      {"i4", tensor<int32_t>({INT32_MIN, 0, INT32_MAX})},
      {"i8", tensor<int64_t>({{INT64_MIN}, {INT64_MAX}})},
      {"b1", tensor<bool>({true, false, true})},
      {"empty_f4", zeros<float>({0, 3})},
  };
}

}  // namespace

TEST_CASE("npy: reads numpy's files, versions 1.0, 2.0 and 3.0, and writes numpy's bytes") {
  for (const auto& entry : numpy_arrays()) {
    const std::string& name = entry.first;  // not a structured binding: clang 14 cannot capture those
    const AnyTensor& expected = entry.second;
    CAPTURE(name);
    const AnyTensor loaded = io::load_npy(test::io_data(name + ".npy"));
    CHECK(test::same_tensor(loaded, expected));
    if (name.find("_v") == std::string::npos)  // kiln writes version 1.0 only
      CHECK(io::serialize_npy(expected) == io::read_file(test::io_data(name + ".npy")));
  }
  // uint8 and int8 are widened to int32.
  const AnyTensor u1 = io::load_npy(test::io_data("u1.npy"));
  CHECK(test::same_tensor(u1, tensor<int32_t>({{0, 1}, {254, 255}})));
  CHECK(test::same_tensor(io::load_npy(test::io_data("i1.npy")), tensor<int32_t>({-128, -1, 0, 127})));
  CHECK_THROWS_WITH_AS(io::load_npy(test::io_data("f4_fortran.npy")),
                       (test::io_data("f4_fortran.npy").string() +
                        ": Fortran-order arrays are not supported (save a C-order array, e.g. np.ascontiguousarray(a))")
                           .c_str(),
                       io::FormatError);
}

TEST_CASE("npy: round trips of every dtype numpy has, views, 0-d and empty tensors") {
  const Tensor<double> grid = arange<double>(12).reshape({3, 4}) / 7.0;
  const std::vector<AnyTensor> tensors = {
      grid.t(),
      arange<int64_t>(20).reshape({4, 5}).slice(1, 1, 5, 2),
      full<int32_t>({}, -9),
      tensor<bool>({true, false}).reshape({2, 1}).expand({2, 3}),
      grid.to<float>().select(0, 1),
      empty<float>({2, 0, 3}),
      zeros<int64_t>({0}),
  };
  test::ScratchDir dir;
  for (const AnyTensor& t : tensors) {
    CAPTURE(t);
    const io::Bytes bytes = io::serialize_npy(t);
    // numpy aligns the data to 64 bytes; so does kiln.
    CHECK((bytes.size() - t.nbytes()) % 64 == 0);
    CHECK(bytes[bytes.size() - t.nbytes() - 1] == '\n');
    CHECK(test::same_tensor(io::parse_npy(bytes), t));
    io::save_npy(dir / "t.npy", t);
    CHECK(test::same_tensor(io::load_npy(dir / "t.npy"), t));
  }
  CHECK_THROWS_WITH_AS(io::serialize_npy(tensor<bfloat16>({bfloat16(1.0f)})),
                       "serialize_npy: NumPy has no bfloat16; convert first, e.g. t.to(ScalarType::Float)", DTypeError);
  CHECK_THROWS_WITH_AS(io::serialize_npy(AnyTensor()), "serialize_npy: the tensor is undefined", std::invalid_argument);
}

TEST_CASE("npy: the header's Python literal") {
  // Keys in any order, double quotes, no trailing comma, whitespace anywhere.
  const AnyTensor t = io::parse_npy(
      npy_with_header("{ \"shape\" : ( 2 , ) ,'fortran_order':False,'descr':'<i8'}   \n", io::Bytes(16, 0)));
  CHECK(t.shape() == Shape{2});
  CHECK(t.dtype() == ScalarType::Int64);
  CHECK(io::parse_npy(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2,), }", io::Bytes(8, 0)))
            .shape() == Shape{1, 2});
  // Version 2.0 and 3.0 store the header length in 4 bytes.
  const std::string_view header = "{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }";
  io::Bytes v2 = bytes_of(std::string_view("\x93NUMPY\x02\x00", 8));
  for (int i = 0; i < 4; ++i) v2.push_back(uint8_t(header.size() >> (8 * i)));
  v2 = concat(concat(v2, bytes_of(header)), {1});
  CHECK(test::same_tensor(io::parse_npy(v2), tensor<bool>({true})));
}

TEST_CASE("npy: each malformed file gets its own error") {
  const std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': ";
  struct Case {
    io::Bytes bytes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {bytes_of("\x93NUMP"), "not a .npy file (it does not start with \\x93NUMPY and a version)"},
      {bytes_of("PK\x03\x04 an npz file"), "not a .npy file (it does not start with \\x93NUMPY and a version)"},
      {bytes_of(std::string_view("\x93NUMPY\x04\x00\x00\x00\x00\x00", 12)),
       "unsupported .npy format version 4.0 (kiln reads 1.0, 2.0 and 3.0)"},
      {bytes_of(std::string_view("\x93NUMPY\x01\x01\x00\x00", 10)),
       "unsupported .npy format version 1.1 (kiln reads 1.0, 2.0 and 3.0)"},
      {bytes_of(std::string_view("\x93NUMPY\x02\x00\x00\x00", 10)), "file ends inside the header length"},
      {bytes_of(std::string_view("\x93NUMPY\x01\x00\x10\x00{}", 12)),
       "header length 16 runs past the end (2 bytes follow the length)"},
      // The header's syntax.
      {npy_with_header(""), "header byte 0: expected '{', found the end of the header"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False}"),
       "header byte 40: the header needs the keys 'descr', 'fortran_order' and 'shape'"},
      {npy_with_header(f4 + "(2,), 'extra': 1}"), "header byte 63: unknown key 'extra'"},
      {npy_with_header(f4 + "(2,), 'descr': '<f4'}"), "header byte 63: duplicate key 'descr'"},
      {npy_with_header(f4 + "(2), }"), "header byte 52: a one-element shape is written (n,), with a comma"},
      {npy_with_header(f4 + "[2], }"), "header byte 50: expected '(', found '['"},
      {npy_with_header(f4 + "(2.0,), }"), "header byte 52: expected an integer, found a number with a fraction or an exponent"},
      {npy_with_header(f4 + "(1, 1, 1, 1, 1, 1, 1, 1, 1), }"), "header byte 75: shape has more than 8 dims, kiln's limit"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': 0, 'shape': (), }"),
       "header byte 34: expected True or False, found '0'"},
      {npy_with_header("{'descr': '<f4\\n', 'fortran_order': False, 'shape': (), }"),
       "header byte 11: escapes and newlines in strings are not supported"},
      {npy_with_header("{'descr' = '<f4'}"), "header byte 9: expected ':', found '='"},
      {npy_with_header("{'descr"), "header byte 2: unterminated string"},
      {npy_with_header(f4 + "(), } x"), "header byte 56: expected the end of the header, found 'x'"},
      // What the header says.
      {npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (), }", io::Bytes(4, 0)),
       "dtype '>f4' is not supported (kiln reads '<f4', '<f8', '<f2', '<i4', '<i8', '|b1', and '|u1' and '|i1' as int32)"},
      {npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (), }", io::Bytes(8, 0)),
       "dtype '<c8' is not supported (kiln reads '<f4', '<f8', '<f2', '<i4', '<i8', '|b1', and '|u1' and '|i1' as int32)"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", io::Bytes(8, 0)),
       "Fortran-order arrays are not supported (save a C-order array, e.g. np.ascontiguousarray(a))"},
      {npy_with_header(f4 + "(2, -3), }"), "shape (2, -3) has a negative entry"},
      {npy_with_header(f4 + "(4294967296, 4294967296), }"),
       "shape (4294967296, 4294967296) is too large (its nonzero sizes multiply past int64)"},
      {npy_with_header(f4 + "(4294967296, 0, 4294967296), }"),
       "shape (4294967296, 0, 4294967296) is too large (its nonzero sizes multiply past int64)"},
      {npy_with_header(f4 + "(2, 3), }", io::Bytes(20, 0)), "the data is 20 bytes, but '<f4' shape (2, 3) needs 6 elements of 4 bytes"},
      {npy_with_header(f4 + "(2,), }", io::Bytes(12, 0)), "the data is 12 bytes, but '<f4' shape (2,) needs 2 elements of 4 bytes"},
      {npy_with_header(f4 + "(), }", io::Bytes(3, 0)), "the data is 3 bytes, but '<f4' shape () needs 1 elements of 4 bytes"},
      {npy_with_header("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", io::Bytes(2, 0)),
       "the data is 2 bytes, but '|u1' shape (3,) needs 3 elements of 1 bytes"},
      {npy_with_header("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", {0, 7}),
       "bool element 1 is byte 7, not 0 or 1"},
  };
  for (const Case& c : cases) {
    CAPTURE(std::string(c.bytes.begin(), c.bytes.end()));
    CHECK(error_of(c.bytes) == "npy buffer: " + c.message);
  }
  test::ScratchDir dir;
  CHECK_THROWS_WITH_AS(io::load_npy(dir / "none.npy"),
                       ((dir / "none.npy").string() + ": cannot open: No such file or directory").c_str(),
                       std::runtime_error);
}

}  // namespace test_io_npy
