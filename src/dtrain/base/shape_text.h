// A tensor shape as error messages spell it: "[8,64,128]".
#pragma once

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>

namespace dtrain {

inline std::string shape_text(c10::IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace dtrain
