// Strict number parsing shared by flags, environment variables and codec names: the whole
// text must be a decimal integer within bounds (no spaces, no trailing characters, no
// silent wrap-around), so "8x", "" and "99999999999" are errors, not 8, 0 and garbage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dtrain {

// The integer `text` spells when it lies in [min, max]; nullopt otherwise.
std::optional<int64_t> parse_integer(const std::string& text, int64_t min, int64_t max);

// The count a double carries (a message or file field): a whole, non-negative value below
// 9e15 (where doubles still hold every integer); nullopt for a fraction, a negative, NaN
// or anything larger.
std::optional<int64_t> count_in_double(double value);

}  // namespace dtrain
