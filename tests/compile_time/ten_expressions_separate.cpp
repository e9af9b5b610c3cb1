// Compile-time budget, ten_expressions_separate: ten_expressions.cpp in a program built with
// KILN_SEPARATE_COMPILATION (hello_separate.cpp says what its part holds).
#define KILN_SEPARATE_COMPILATION 1
#include "ten_expressions.cpp"
