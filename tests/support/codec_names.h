// Test support: what parse_codec says about a codec name.
#pragma once

#include <stdexcept>
#include <string>

#include "dtrain/compress/codec.h"

namespace dtrain::testing {

// The message parse_codec throws for `name`, or "accepted".
inline std::string parse_error(const std::string& name) {
  try {
    compress::parse_codec(name);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace dtrain::testing
