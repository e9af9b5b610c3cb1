#pragma once
// <mpi.h> without the deprecated MPI-2 C++ bindings (Open MPI's and MPICH's mpicxx headers, which kiln does not
// use and which warn under -Wextra); a program that wants them includes <mpi.h> itself first.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
