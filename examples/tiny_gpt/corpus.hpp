#pragma once
// The text tiny_gpt learns: Debian's fortunes package (/usr/share/games/fortunes, about 2.5 MB of English:
// quotations, jokes, poems), its plain files concatenated in name order with each "%" separator line turned
// into a blank line. Characters are bytes; the vocabulary is the bytes that occur.
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

namespace tiny_gpt {

namespace fs = std::filesystem;
using kiln::Tensor;

struct Corpus {
  std::string vocab;            // vocab[i]: the byte of token i
  std::array<int64_t, 256> id;  // byte -> token (-1: not in the vocabulary)
  Tensor<int64_t> train, val;   // token streams: the first 90% and the last 10% of the text

  std::string decode(const std::vector<int64_t>& tokens) const {
    std::string s;
    for (int64_t t : tokens) s += vocab.at(size_t(t));
    return s;
  }
  // Bytes of text outside the vocabulary are dropped.
  std::vector<int64_t> encode(const std::string& text) const {
    std::vector<int64_t> out;
    for (unsigned char c : text)
      if (id[c] >= 0) out.push_back(id[c]);
    return out;
  }
};

inline std::string read_fortunes(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))  // the text files; .dat (indexes) and .u8 (links) skipped
    if (e.is_regular_file() && !e.is_symlink() && e.path().filename().string().find('.') == std::string::npos)
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    for (std::string line; std::getline(in, line);) text += line == "%" ? "\n" : line + "\n";
  }
  kiln::check(text.size() > 10000, dir.string(), ": expected the fortune files of Debian's fortunes package, found ",
              files.size(), " files with ", text.size(), " bytes");
  return text;
}

// Tokens from the text in `vocab` order, which the checkpoint keeps, so a resumed or sampling run decodes the same.
inline Corpus make_corpus(const std::string& text, std::string vocab = {}) {
  Corpus c;
  if (vocab.empty()) {
    std::array<bool, 256> seen{};
    for (unsigned char ch : text) seen[ch] = true;
    for (int b = 0; b < 256; ++b)
      if (seen[size_t(b)]) vocab += char(b);
  }
  c.vocab = vocab;
  c.id.fill(-1);
  for (size_t i = 0; i < vocab.size(); ++i) c.id[static_cast<unsigned char>(vocab[i])] = int64_t(i);
  const std::vector<int64_t> tokens = c.encode(text);
  const size_t split = tokens.size() * 9 / 10;
  c.train = kiln::tensor(std::vector<int64_t>(tokens.begin(), tokens.begin() + std::ptrdiff_t(split)));
  c.val = kiln::tensor(std::vector<int64_t>(tokens.begin() + std::ptrdiff_t(split), tokens.end()));
  return c;
}

// A batch of `batch` windows of `block` tokens at random offsets: inputs x and next-token targets y.
struct Batch {
  Tensor<int64_t> x, y;
};
inline Batch sample_batch(const Tensor<int64_t>& stream, int64_t batch, int64_t block, kiln::Generator& gen,
                          kiln::Device device = kiln::kCPU) {
  const Tensor<int64_t> offsets = kiln::randint(0, stream.numel() - block - 1, {batch}, &gen);
  Batch b{kiln::empty<int64_t>({batch, block}), kiln::empty<int64_t>({batch, block})};
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t* src = stream.data_ptr() + offsets.data_ptr()[i];
    std::copy(src, src + block, b.x.data_ptr() + i * block);
    std::copy(src + 1, src + block + 1, b.y.data_ptr() + i * block);
  }
  return {b.x.to(device), b.y.to(device)};
}

}  // namespace tiny_gpt
