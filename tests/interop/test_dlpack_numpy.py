#!/usr/bin/env python3
"""kiln <-> NumPy through DLPack, with ctypes and tests/interop/dlpack_numpy_lib.cpp (path in argv[1]).

NumPy 1.x speaks the legacy capsule ("dltensor"); NumPy 2 asks for the versioned one ("dltensor_versioned")
when it passes max_version, and still exports legacy capsules when not asked: each direction runs with every
struct the NumPy at hand speaks. Prints one line per check and ends with "N passed, N failed".
"""
import ctypes
import sys

import numpy as np  # a failure here is a failure of the test: scripts/test.sh installs python3-numpy

lib = ctypes.CDLL(sys.argv[1])
lib.kiln_test_export.restype = ctypes.c_void_p
lib.kiln_test_export.argtypes = [ctypes.c_int, ctypes.c_int]
lib.kiln_test_delete.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.kiln_test_import_scale.restype = ctypes.c_double
lib.kiln_test_import_scale.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_double]
lib.kiln_test_export_half.restype = ctypes.c_void_p
lib.kiln_test_export_half.argtypes = [ctypes.c_int]
lib.kiln_test_import_half_sum.restype = ctypes.c_double
lib.kiln_test_import_half_sum.argtypes = [ctypes.c_void_p, ctypes.c_int]

api = ctypes.pythonapi
Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, Destructor]
api.PyCapsule_IsValid.restype = ctypes.c_int
api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.restype = ctypes.c_int
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

NAMES = {0: b"dltensor", 1: b"dltensor_versioned"}
USED = {0: b"used_dltensor", 1: b"used_dltensor_versioned"}


# The destructor gets the dying capsule as a raw pointer: read it without making a Python reference to it.
capsule_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def destructor(versioned):
    # A capsule still under its unused name was never consumed: its producer's deleter must run.
    def run(capsule):
        if api.PyCapsule_IsValid(capsule, NAMES[versioned]):
            lib.kiln_test_delete(capsule_pointer_raw(capsule, NAMES[versioned]), versioned)
    return Destructor(run)


DESTRUCTORS = {v: destructor(v) for v in (0, 1)}


class KilnTensor:
    """What np.from_dlpack needs: __dlpack__ and __dlpack_device__ over a kiln export."""

    def __init__(self, transposed):
        self.transposed = transposed

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        versioned = int(max_version is not None and max_version[0] >= 1)
        self.versioned = versioned
        return api.PyCapsule_New(lib.kiln_test_export(versioned, self.transposed), NAMES[versioned],
                                 DESTRUCTORS[versioned])

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


results = []


def check(name, ok):
    results.append(bool(ok))
    print(("ok   " if ok else "FAIL ") + name)


numpy2 = int(np.__version__.split(".")[0]) >= 2
print(f"NumPy {np.__version__}")

# kiln -> NumPy: zero copy, strides, and kiln's memory released when NumPy lets go.
for transposed in (0, 1):
    source = KilnTensor(transposed)
    a = np.from_dlpack(source)
    expected = np.arange(6, dtype=np.float32).reshape(2, 3)
    if transposed:
        expected = expected.T
    struct = "versioned" if source.versioned else "legacy"
    check(f"kiln -> numpy ({struct}, transposed={transposed}): values", np.array_equal(a, expected))
    check(f"kiln -> numpy ({struct}, transposed={transposed}): strides {a.strides}",
          a.strides == ((4, 12) if transposed else (12, 4)))
    check(f"kiln -> numpy ({struct}): memory alive while NumPy holds it", lib.kiln_test_live_exports() == 1)
    del a
    check(f"kiln -> numpy ({struct}): released when NumPy drops it", lib.kiln_test_live_exports() == 0)
check("kiln -> numpy: the versioned struct was used" if numpy2 else "kiln -> numpy: NumPy 1.x used the legacy struct",
      source.versioned == int(numpy2))

# An export nobody consumes is released by its capsule.
capsule = KilnTensor(0).__dlpack__()
del capsule
check("an unconsumed kiln capsule releases its memory", lib.kiln_test_live_exports() == 0)

# NumPy -> kiln: kiln writes into NumPy's memory, and releases NumPy's export when done.
for versioned in ((0, 1) if numpy2 else (0,)):
    x = np.arange(5, dtype=np.float64)[::-1]  # a negative stride
    refs = sys.getrefcount(x)
    capsule = x.__dlpack__(max_version=(1, 0)) if versioned else x.__dlpack__()
    pointer = api.PyCapsule_GetPointer(capsule, NAMES[versioned])
    total = lib.kiln_test_import_scale(pointer, versioned, 2.0)
    api.PyCapsule_SetName(capsule, USED[versioned])  # consumed: the capsule no longer owns it
    del capsule
    struct = "versioned" if versioned else "legacy"
    check(f"numpy -> kiln ({struct}): kiln's sum of the scaled view", total == 20.0)
    check(f"numpy -> kiln ({struct}): the write is visible to NumPy", np.array_equal(x, 2.0 * np.arange(5)[::-1]))
    check(f"numpy -> kiln ({struct}): NumPy's export released", sys.getrefcount(x) == refs)

# Read-only NumPy memory (versioned struct only): kiln copies it, NumPy's array is untouched.
if numpy2:
    y = np.arange(3, dtype=np.float64)
    y.flags.writeable = False
    capsule = y.__dlpack__(max_version=(1, 0))
    total = lib.kiln_test_import_scale(api.PyCapsule_GetPointer(capsule, NAMES[1]), 1, 3.0)
    api.PyCapsule_SetName(capsule, USED[1])
    del capsule
    check("numpy -> kiln (read-only): kiln worked on a copy", total == 9.0 and np.array_equal(y, np.arange(3.0)))

# float16 both ways: kDLFloat with 16 bits is NumPy's float16, bit for bit.
class KilnHalf(KilnTensor):
    def __init__(self):
        super().__init__(0)

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        versioned = int(max_version is not None and max_version[0] >= 1)
        return api.PyCapsule_New(lib.kiln_test_export_half(versioned), NAMES[versioned], DESTRUCTORS[versioned])


halves = np.from_dlpack(KilnHalf())
check(f"kiln -> numpy (float16): dtype {halves.dtype}, values",
      halves.dtype == np.float16 and halves.tolist() == [1.5, -2.75, 65504.0, 2.0 ** -24])
del halves
h = np.array([1.0, -2.0, 0.5, 65504.0, 2.0 ** -24, -0.0], dtype=np.float16)
capsule = h.__dlpack__()
total = lib.kiln_test_import_half_sum(api.PyCapsule_GetPointer(capsule, NAMES[0]), 0)
api.PyCapsule_SetName(capsule, USED[0])
del capsule
check("numpy -> kiln (float16): kiln reads NumPy's halves", total == float(h.astype(np.float64).sum()))

passed = sum(results)
print(f"{passed} passed, {len(results) - passed} failed")
sys.exit(0 if passed == len(results) else 1)
