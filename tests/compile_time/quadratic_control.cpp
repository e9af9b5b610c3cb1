// Negative control for scripts/compile_growth.py: level k of this "chain" instantiates k functions, as binding
// each node's derivative to its sub-expressions did (DESIGN.md), so the functions and their code grow with
// KILN_CHAIN_DEPTH squared. The growth check must call it superlinear (tests/compile_time/meson.build).
#include <utility>

#ifndef KILN_CHAIN_DEPTH
#define KILN_CHAIN_DEPTH 40
#endif

template <int Level, int Term>
int term(int x) {
  return x * Level + Term;
}

template <int Level, int... Terms>
int level(int x, std::integer_sequence<int, Terms...>) {
  return (term<Level, Terms>(x) + ... + 0);
}

template <int... Levels>
int chain(int x, std::integer_sequence<int, Levels...>) {
  return (level<Levels>(x, std::make_integer_sequence<int, Levels + 1>{}) + ... + 0);
}

int main(int argc, char**) { return chain(argc, std::make_integer_sequence<int, KILN_CHAIN_DEPTH>{}) & 1; }
