// Negative control for scripts/compile_growth.py: level k of this "chain" instantiates k functions, so the
// functions and their code grow with KILN_CHAIN_DEPTH squared. The growth check must call it superlinear
// (tests/compile_time/meson.build). It shows the check sees quadratic instantiation; a derivation that
// recomputes subtrees through the same functions is bounded by the -O2 budget instead (the script's docstring).
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
