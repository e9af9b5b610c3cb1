// Compile-time budget, hello_separate: hello.cpp in a program built with KILN_SEPARATE_COMPILATION, whose tensor
// runtime (storage, shapes, the loop driver) and autograd runtime (the engine, FusedNode, the view and gradient
// arithmetic) are compiled once in the program's part: what is left is the program's own expression.
#define KILN_SEPARATE_COMPILATION 1
#include "hello.cpp"
