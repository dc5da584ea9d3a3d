#include "dtrain/data/bpe_tokenizer.h"

#include <nlohmann/json.hpp>

#include <array>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "dtrain/data/pretokenize.h"

namespace dtrain::data {
namespace {

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

std::array<std::string, 256> make_byte_symbols() {
  std::array<std::string, 256> out;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    out[static_cast<size_t>(b)] = utf8(printable ? static_cast<char32_t>(b) : next++);
  }
  return out;
}

// Splits a UTF-8 string of stand-in symbols into its code points.
std::vector<std::string> symbols_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80)
      ++n;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

int64_t required_id(const std::unordered_map<std::string, int64_t>& vocab, const char* token) {
  const auto it = vocab.find(token);
  if (it == vocab.end())
    throw std::runtime_error(std::string("the vocabulary lacks the special token ") + token);
  return it->second;
}

std::unordered_map<std::string, int64_t> read_vocab(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error(path + ": not a JSON object of token -> id");
  std::unordered_map<std::string, int64_t> vocab;
  for (const auto& [token, id] : j.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max())
      throw std::runtime_error(path + ": the id of '" + token + "' is not a non-negative integer");
    vocab[token] = id.get<int64_t>();
  }
  return vocab;
}

std::vector<std::pair<std::string, std::string>> read_merges(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.rfind("#version", 0) == 0 || line.empty()) continue;
    const auto space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      throw std::runtime_error(path + ":" + std::to_string(number) +
                               ": expected two symbols separated by one space");
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

}  // namespace

const std::string& byte_symbol(unsigned char byte) {
  static const std::array<std::string, 256> symbols = make_byte_symbols();
  return symbols[byte];
}

BpeTokenizer BpeTokenizer::from_dir(const std::string& dir) {
  auto vocab = read_vocab(dir + "/vocab.json");  // first: its error names the folder's main file
  return BpeTokenizer(std::move(vocab), read_merges(dir + "/merges.txt"));
}

BpeTokenizer::BpeTokenizer(std::unordered_map<std::string, int64_t> vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges)
    : vocab_(std::move(vocab)) {
  for (size_t i = 0; i < merges.size(); ++i)
    ranks_.emplace(merges[i], static_cast<int>(i));  // the first listing of a pair counts
  bos_ = required_id(vocab_, "<s>");
  pad_ = required_id(vocab_, "<pad>");
  eos_ = required_id(vocab_, "</s>");
  unk_ = required_id(vocab_, "<unk>");
}

int64_t BpeTokenizer::vocab_size() const {
  int64_t top = -1;
  for (const auto& [token, id] : vocab_)
    top = std::max(top, id);
  return top + 1;
}

std::vector<int64_t> BpeTokenizer::encode_piece(const std::string& piece) const {
  if (const auto hit = cache_.find(piece); hit != cache_.end()) return hit->second;
  std::string mapped;
  for (const char c : piece)
    mapped += byte_symbol(static_cast<unsigned char>(c));
  std::vector<std::string> word = symbols_of(mapped);
  while (word.size() > 1) {
    int best = std::numeric_limits<int>::max();
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks_.find({word[i], word[i + 1]});
      if (it != ranks_.end() && it->second < best) best = it->second;
    }
    if (best == std::numeric_limits<int>::max()) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size()) {
        const auto it = ranks_.find({word[i], word[i + 1]});
        if (it != ranks_.end() && it->second == best) {
          merged.push_back(word[i] + word[i + 1]);
          ++i;
          continue;
        }
      }
      merged.push_back(word[i]);
    }
    word = std::move(merged);
  }
  std::vector<int64_t> ids;
  for (const auto& symbol : word) {
    const auto it = vocab_.find(symbol);
    ids.push_back(it == vocab_.end() ? unk_ : it->second);
  }
  if (cache_.size() < (1u << 20)) cache_.emplace(piece, ids);
  return ids;
}

std::vector<int64_t> BpeTokenizer::encode_text(const std::string& text) const {
  std::vector<int64_t> ids;
  for (const auto& piece : pretokenize(text)) {
    const auto piece_ids = encode_piece(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

Encoding BpeTokenizer::encode(const std::string& a, const std::optional<std::string>& b,
                              int64_t max_length) const {
  const int64_t specials = b ? 4 : 2;
  if (max_length < specials + (b ? 2 : 1))
    throw std::invalid_argument("--max-seq-len " + std::to_string(max_length) +
                                " leaves no room for tokens");
  std::vector<int64_t> first = encode_text(a),
                       second = b ? encode_text(*b) : std::vector<int64_t>{};
  Encoding e;
  // Longest first, one token at a time, from the second on a tie (as transformers' Python
  // tokenizers do).
  while (static_cast<int64_t>(first.size() + second.size()) + specials > max_length) {
    (first.size() > second.size() ? first : second).pop_back();
    e.truncated = true;
  }
  e.ids.push_back(bos_);
  e.ids.insert(e.ids.end(), first.begin(), first.end());
  e.ids.push_back(eos_);
  if (b) {
    e.ids.push_back(eos_);
    e.ids.insert(e.ids.end(), second.begin(), second.end());
    e.ids.push_back(eos_);
  }
  e.mask.assign(e.ids.size(), 1);
  e.ids.resize(static_cast<size_t>(max_length), pad_);
  e.mask.resize(static_cast<size_t>(max_length), 0);
  return e;
}

}  // namespace dtrain::data
