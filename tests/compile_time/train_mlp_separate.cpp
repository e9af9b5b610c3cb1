// Compile-time budget, train_mlp_separate: train_mlp.cpp in a program built with KILN_SEPARATE_COMPILATION,
// whose layers, losses, optimizer and backward engine are compiled once in its compiled part (separate_part.cpp).
#define KILN_SEPARATE_COMPILATION 1
#include "train_mlp.cpp"
