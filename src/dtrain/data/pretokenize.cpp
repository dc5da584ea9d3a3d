#include "dtrain/data/pretokenize.h"

#include <locale.h>
#include <wctype.h>

#include <stdexcept>

namespace dtrain::data {
namespace {

enum class Kind { kLetter, kNumber, kSpace, kOther };

struct CodePoint {
  char32_t value = 0;
  size_t begin = 0, end = 0;  // bytes of the text
  Kind kind = Kind::kOther;
};

locale_t utf8_locale() {
  static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  if (locale == static_cast<locale_t>(0))
    throw std::runtime_error("the C.UTF-8 locale is not available (glibc 2.35 or later has it)");
  return locale;
}

bool is_number(char32_t c) {
  struct Range {
    char32_t first, last;
  };
  static constexpr Range kNumbers[] = {
      {0x30, 0x39},     {0xB2, 0xB3},     {0xB9, 0xB9},     {0xBC, 0xBE},     {0x660, 0x669},
      {0x6F0, 0x6F9},   {0x7C0, 0x7C9},   {0x966, 0x96F},   {0x9E6, 0x9EF},   {0xA66, 0xA6F},
      {0xAE6, 0xAEF},   {0xB66, 0xB6F},   {0xBE6, 0xBF2},   {0xC66, 0xC6F},   {0xCE6, 0xCEF},
      {0xD66, 0xD78},   {0xE50, 0xE59},   {0xED0, 0xED9},   {0xF20, 0xF33},   {0x1040, 0x1049},
      {0x17E0, 0x17E9}, {0x1810, 0x1819}, {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089},
      {0x2150, 0x2189}, {0x2460, 0x249B}, {0x24EA, 0x24FF}, {0x2776, 0x2793}, {0x3007, 0x3007},
      {0x3021, 0x3029}, {0x3038, 0x303A}, {0xFF10, 0xFF19}};
  for (const Range& r : kNumbers)
    if (c >= r.first && c <= r.last) return true;
  return false;
}

Kind classify(char32_t c, bool valid) {
  if (!valid) return Kind::kOther;
  if (is_number(c)) return Kind::kNumber;
  const auto w = static_cast<wint_t>(c);
  if (iswspace_l(w, utf8_locale())) return Kind::kSpace;
  if (iswalpha_l(w, utf8_locale())) return Kind::kLetter;
  return Kind::kOther;
}

// Decodes one code point at `i`; an invalid sequence yields its first byte alone.
CodePoint decode(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  size_t length = b < 0x80           ? 1
                  : (b >> 5) == 0x6  ? 2
                  : (b >> 4) == 0xE  ? 3
                  : (b >> 3) == 0x1E ? 4
                                     : 0;
  char32_t value = length == 1   ? b
                   : length == 2 ? (b & 0x1F)
                   : length == 3 ? (b & 0x0F)
                                 : (b & 0x07);
  bool valid = length != 0 && i + length <= s.size();
  for (size_t k = 1; valid && k < length; ++k) {
    valid = (byte(i + k) & 0xC0) == 0x80;
    value = (value << 6) | (byte(i + k) & 0x3F);
  }
  if (!valid) return {b, i, i + 1, Kind::kOther};
  return {value, i, i + length, classify(value, true)};
}

std::vector<CodePoint> decode_all(const std::string& text) {
  std::vector<CodePoint> out;
  for (size_t i = 0; i < text.size();) {
    out.push_back(decode(text, i));
    i = out.back().end;
  }
  return out;
}

// Length in code points of a contraction ('s 't 're 've 'm 'll 'd) at `i`, or 0.
size_t contraction(const std::vector<CodePoint>& c, size_t i) {
  if (c[i].value != U'\'' || i + 1 >= c.size()) return 0;
  const char32_t a = c[i + 1].value;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= c.size()) return 0;
  const char32_t b = c[i + 2].value;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

size_t run_of(const std::vector<CodePoint>& c, size_t i, Kind kind) {
  size_t j = i;
  while (j < c.size() && c[j].kind == kind)
    ++j;
  return j - i;
}

size_t run_of_other(const std::vector<CodePoint>& c, size_t i) {
  size_t j = i;
  while (j < c.size() && c[j].kind == Kind::kOther)
    ++j;
  return j - i;
}

// Code points of the piece starting at `i`, by the pattern's alternatives in order.
size_t piece_length(const std::vector<CodePoint>& c, size_t i) {
  if (const size_t n = contraction(c, i)) return n;
  const size_t space = c[i].value == U' ' && i + 1 < c.size() ? 1 : 0;
  const Kind next = c[i + space].kind;
  if (space == 0 || next != Kind::kSpace) {
    if (next == Kind::kLetter || next == Kind::kNumber) return space + run_of(c, i + space, next);
    if (next == Kind::kOther) return space + run_of_other(c, i + space);
  }
  // Whitespace: all of it at the end or before more whitespace; before anything else all
  // but its last character (\s+(?!\S)), or all of a single one (\s+).
  const size_t run = run_of(c, i, Kind::kSpace);
  if (i + run == c.size()) return run;
  return run > 1 ? run - 1 : run;
}

}  // namespace

std::vector<std::string> pretokenize(const std::string& text) {
  const std::vector<CodePoint> c = decode_all(text);
  std::vector<std::string> pieces;
  for (size_t i = 0; i < c.size();) {
    const size_t n = piece_length(c, i);
    pieces.push_back(text.substr(c[i].begin, c[i + n - 1].end - c[i].begin));
    i += n;
  }
  return pieces;
}

}  // namespace dtrain::data
