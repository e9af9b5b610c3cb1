#pragma once
// kiln::io: safetensors, NumPy .npy and .npz and IDX (MNIST) files, with atomic writes (opt-in, not behind
// <kiln/kiln.hpp>). POSIX only; the IDX and .npz readers use zlib, so link with -lz.
#include "kiln/io/atomic_file.hpp"
#include "kiln/io/idx.hpp"
#include "kiln/io/npy.hpp"
#include "kiln/io/npz.hpp"
#include "kiln/io/safetensors.hpp"
