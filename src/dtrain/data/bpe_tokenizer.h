// RoBERTa's tokenizer: byte-level BPE (GPT-2's) from a vocab.json (token -> id) and a
// merges.txt (one "left right" pair per line, by priority, after a "#version" line), as
// Hugging Face ships them. Text is pre-tokenized (pretokenize.h), each piece's bytes are
// written as GPT-2's printable stand-in characters, and pairs are merged lowest rank
// first. Inputs are formatted as RoBERTa's: "<s> A </s>" and "<s> A </s></s> B </s>",
// truncated longest-first to the maximum length and padded with an attention mask.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dtrain::data {

struct Encoding {
  std::vector<int64_t> ids;   // max_length of them, padded with the pad id
  std::vector<uint8_t> mask;  // 1 for a real token, 0 for padding
  bool truncated = false;
};

class BpeTokenizer {
 public:
  // Reads dir/vocab.json and dir/merges.txt; a malformed file is a std::runtime_error
  // naming the file and line. The vocabulary must hold <s>, <pad>, </s> and <unk>.
  static BpeTokenizer from_dir(const std::string& dir);
  BpeTokenizer(std::unordered_map<std::string, int64_t> vocab,
               const std::vector<std::pair<std::string, std::string>>& merges);

  // The tokens of `text` with no special tokens.
  std::vector<int64_t> encode_text(const std::string& text) const;
  // One input (b empty) or a pair, formatted, truncated and padded to `max_length` tokens.
  Encoding encode(const std::string& a, const std::optional<std::string>& b,
                  int64_t max_length) const;

  int64_t vocab_size() const;  // one past the largest id
  int64_t bos_id() const { return bos_; }
  int64_t eos_id() const { return eos_; }
  int64_t pad_id() const { return pad_; }
  int64_t unk_id() const { return unk_; }

 private:
  std::vector<int64_t> encode_piece(const std::string& piece) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::map<std::pair<std::string, std::string>, int> ranks_;
  int64_t bos_ = 0, eos_ = 2, pad_ = 1, unk_ = 3;
  // Pieces seen before; encoding is not thread-safe because of it.
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

// GPT-2's stand-in for a byte: printable Latin-1 bytes stand for themselves, the others
// for the code points from U+0100 on, in byte order (so a space is "Ġ"). As UTF-8.
const std::string& byte_symbol(unsigned char byte);

}  // namespace dtrain::data
