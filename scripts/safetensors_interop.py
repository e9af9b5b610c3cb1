#!/usr/bin/env python3
"""Interoperability of kiln::io with Python's safetensors and NumPy (pip install safetensors numpy).

  python3 scripts/safetensors_interop.py write [DIR]   writes the reference files (default tests/fixtures/io)
  python3 scripts/safetensors_interop.py check DIR     reads the files kiln wrote into DIR with Python and checks them

`write` makes the files that tests/io read and compare byte for byte with what kiln writes for the same values:
reference.safetensors (one tensor of each kiln dtype, a 0-d and an empty one, and metadata), one .npy file per
dtype (versions 1.0, 2.0, 3.0, and uint8/int8/Fortran-order files that kiln widens or refuses), .npz archives
(numpy.savez and numpy.savez_compressed), and IDX files, plain and gzipped. The values are the ones tests/io/io_test_util.hpp spells out in C++; keep the two in step.

`check` is the other direction. Let the C++ test write kiln's files and read them here:
  KILN_INTEROP_DIR=/tmp/kiln_interop ./io_tests -tc='*KILN_INTEROP_DIR*' && python3 scripts/safetensors_interop.py check /tmp/kiln_interop
"""
import gzip
import os
import struct
import sys

import numpy as np
import safetensors

# bfloat16 has no NumPy dtype: its values are given as raw bits (1.0, -2.0, 3.140625, the smallest subnormal).
BF16_BITS = np.array([0x3F80, 0xC000, 0x4049, 0x0001], dtype=np.uint16)


def reference_tensors():
    """The tensors of reference.safetensors, bfloat16 aside."""
    return {
        "f32": (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3),
        "f64": np.arange(4, dtype=np.float64) / 3,
        "i32": np.array([-(2**31), -1, 0, 7, 2**31 - 1], dtype=np.int32),
        "i64": np.array([[-(2**63), -1, 0], [2**40 + 3, 5, 2**63 - 1]], dtype=np.int64),
        "mask": np.array([[True, False], [False, True], [True, True]]),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float64),
    }


METADATA = {"format": "kiln-test"}


def write_reference_safetensors(path):
    tensors = reference_tensors()
    specs = {
        name: safetensors.TensorSpec(dtype=a.dtype.name, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
        for name, a in tensors.items()
    }
    specs["bf16"] = safetensors.TensorSpec(
        dtype="bfloat16", shape=[4], data_ptr=BF16_BITS.ctypes.data, data_len=BF16_BITS.nbytes
    )
    with open(path, "wb") as f:
        f.write(bytes(safetensors.serialize(specs, metadata=METADATA)))


def write_npy(directory):
    arrays = {
        "f4": (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3),
        "f8": np.array(1 / 3),  # 0-d
        "i4": np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32),
        "i8": np.array([[-(2**63)], [2**63 - 1]], dtype=np.int64),
        "b1": np.array([True, False, True]),
        "empty_f4": np.zeros((0, 3), dtype=np.float32),
        "u1": np.array([[0, 1], [254, 255]], dtype=np.uint8),
        "i1": np.array([-128, -1, 0, 127], dtype=np.int8),
        "f4_fortran": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    }
    for name, a in arrays.items():
        np.save(os.path.join(directory, name + ".npy"), a)
    for version in [(2, 0), (3, 0)]:
        with open(os.path.join(directory, f"f4_v{version[0]}.npy"), "wb") as f:
            np.lib.format.write_array(f, arrays["f4"], version=version)


def npz_arrays():
    """The arrays of arrays.npz (numpy.savez) and arrays_compressed.npz (numpy.savez_compressed)."""
    return {
        "weights": (np.arange(12, dtype=np.float32) * 0.25).reshape(3, 4),
        "labels": np.array([3, 1, 4, 1, 5], dtype=np.int64),
        "mask": np.array([True, False]),
        "scale": np.array(0.5),
        "zeros": np.zeros(1000, dtype=np.float64),  # compresses well
    }


def write_npz(directory):
    np.savez(os.path.join(directory, "arrays.npz"), **npz_arrays())
    np.savez_compressed(os.path.join(directory, "arrays_compressed.npz"), **npz_arrays())


def idx_bytes(type_code, fmt, a):
    head = struct.pack(">BBBB", 0, 0, type_code, a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape)
    return head + a.astype(fmt).tobytes()


def write_idx(directory):
    images = (np.arange(2 * 3 * 4) * 11 % 256).astype(np.uint8).reshape(2, 3, 4)
    labels = np.array([7, 0, 9, 255, 1], dtype=np.uint8)
    with open(os.path.join(directory, "images-idx3-ubyte"), "wb") as f:
        f.write(idx_bytes(0x08, ">u1", images))
    # mtime=0 keeps the file the same from run to run.
    with open(os.path.join(directory, "images-idx3-ubyte.gz"), "wb") as raw:
        with gzip.GzipFile(filename="images-idx3-ubyte", mode="wb", fileobj=raw, mtime=0) as f:
            f.write(idx_bytes(0x08, ">u1", images))
    with open(os.path.join(directory, "labels-idx1-ubyte.gz"), "wb") as raw:
        with gzip.GzipFile(filename="labels-idx1-ubyte", mode="wb", fileobj=raw, mtime=0) as f:
            f.write(idx_bytes(0x08, ">u1", labels))
    with open(os.path.join(directory, "int16-idx2"), "wb") as f:
        f.write(idx_bytes(0x0B, ">i2", np.array([[-32768, -1], [0, 32767]])))
    with open(os.path.join(directory, "float64-idx1"), "wb") as f:
        f.write(idx_bytes(0x0E, ">f8", np.array([0.5, -1 / 3, 1e300])))


def check(directory):
    """Reads kiln's files with Python's readers and compares them with the reference values."""
    path = os.path.join(directory, "kiln.safetensors")
    expected = reference_tensors()
    with safetensors.safe_open(path, "numpy") as f:  # validates the whole header and layout
        assert sorted(f.keys()) == sorted([*expected, "bf16"]), f"{path}: tensors {sorted(f.keys())}"
        assert f.metadata() == METADATA, f.metadata()
        for name, a in expected.items():  # NumPy has no bfloat16: that one is checked below
            b = f.get_tensor(name)
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), f"{path}: {name} is {b!r}"
    with open(path, "rb") as f:
        raw = dict(safetensors.deserialize(f.read()))
    assert raw["bf16"]["dtype"] == "BF16" and raw["bf16"]["shape"] == [4], raw["bf16"]
    assert np.array_equal(np.frombuffer(bytes(raw["bf16"]["data"]), "<u2"), BF16_BITS), raw["bf16"]
    a = np.load(os.path.join(directory, "kiln.npy"))
    assert a.dtype == np.int64 and np.array_equal(a, np.arange(12).reshape(3, 4).T), repr(a)
    for name in ("kiln.npz", "kiln_compressed.npz"):
        with np.load(os.path.join(directory, name)) as z:
            expected = npz_arrays()
            assert sorted(z.files) == sorted(expected), f"{name}: {z.files}"
            for key, value in expected.items():
                assert z[key].dtype == value.dtype and np.array_equal(z[key], value), f"{name}: {key} is {z[key]!r}"
    print(f"ok: Python's safetensors {safetensors.__version__} and NumPy {np.__version__} read kiln's files in {directory}")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "write":
        directory = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "io")
        os.makedirs(directory, exist_ok=True)
        write_reference_safetensors(os.path.join(directory, "reference.safetensors"))
        write_npy(directory)
        write_npz(directory)
        write_idx(directory)
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
