#pragma once
// kiln::io: safetensors, NumPy .npy and IDX (MNIST) files, with atomic writes (opt-in, not behind
// <kiln/kiln.hpp>). POSIX only; the IDX reader decompresses gzip with zlib, so link with -lz.
#include "kiln/io/atomic_file.hpp"
#include "kiln/io/idx.hpp"
#include "kiln/io/npy.hpp"
#include "kiln/io/safetensors.hpp"
