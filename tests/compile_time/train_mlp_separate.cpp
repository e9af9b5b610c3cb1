// Compile-time budget, train_mlp_separate: train_mlp.cpp in a program built with KILN_SEPARATE_COMPILATION, whose
// layers, losses, optimizer, DataLoader and backward engine are compiled once in the program's part (its one .cpp
// that includes <kiln/separate_compilation.hpp>; not timed here).
#define KILN_SEPARATE_COMPILATION 1
#include "train_mlp.cpp"
