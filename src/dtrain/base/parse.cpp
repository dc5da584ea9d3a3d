#include "dtrain/base/parse.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace dtrain {

std::optional<int64_t> parse_integer(const std::string& text, int64_t min, int64_t max) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front())) != 0 ||
      text.front() == '+')
    return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return std::nullopt;
  if (v < min || v > max) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<int64_t> count_in_double(double value) {
  if (!(value >= 0 && value < 9.0e15 && value == std::floor(value))) return std::nullopt;
  return static_cast<int64_t>(value);
}

}  // namespace dtrain
