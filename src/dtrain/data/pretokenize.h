// GPT-2's pre-tokenizer, which byte-level BPE (RoBERTa's tokenizer) runs before merging:
// text splits into the pieces of the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// so a word keeps the one space before it, and a run of whitespace before a word leaves
// its last character to that word. Letters (\p{L}) and whitespace are glibc's C.UTF-8
// classes; numbers (\p{N}) are the ASCII digits and the common Unicode digit, superscript,
// fraction and numeral blocks (glibc counts non-ASCII digits as letters). Invalid UTF-8
// bytes stand alone as symbols (neither letters nor numbers), so no input is refused.
#pragma once

#include <string>
#include <vector>

namespace dtrain::data {

std::vector<std::string> pretokenize(const std::string& text);

}  // namespace dtrain::data
