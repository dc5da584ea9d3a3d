// The BPE tokenizer's files (data::BpeTokenizer::from_dir): the input is vocab.json, a NUL,
// merges.txt, a NUL and a text to encode. Any files are a tokenizer or a
// std::runtime_error; a tokenizer encodes any text into ids of its vocabulary, padded and
// masked to the length asked for.
#include <cstdlib>

#include "dtrain/data/bpe_tokenizer.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = dtrain::fuzz::split_parts(dtrain::fuzz::as_text(data, size), 3);
  if (parts.size() < 3) return 0;
  dtrain::fuzz::write_input("vocab.json", parts[0]);
  dtrain::fuzz::write_input("merges.txt", parts[1]);
  std::optional<dtrain::data::BpeTokenizer> tokenizer;
  try {
    tokenizer = dtrain::data::BpeTokenizer::from_dir(dtrain::fuzz::scratch_dir());
  } catch (const std::runtime_error&) {
    return 0;
  }
  constexpr int64_t kLength = 32;
  const std::string text(parts[2]);
  const auto half = text.size() / 2;
  for (const auto& e : {tokenizer->encode(text, std::nullopt, kLength),
                        tokenizer->encode(text.substr(0, half), text.substr(half), kLength)}) {
    if (e.ids.size() != kLength || e.mask.size() != kLength) std::abort();
    for (size_t i = 0; i < e.ids.size(); ++i) {
      if (e.ids[i] < 0 || e.ids[i] >= tokenizer->vocab_size()) std::abort();
      if (!e.mask[i] && e.ids[i] != tokenizer->pad_id()) std::abort();
    }
  }
  return 0;
}
