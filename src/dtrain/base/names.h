// One table of names per enum: parsing and printing read the same table, so every name is
// spelled once, and every enum of the project prints through `to_string(value)` and parses
// through `parse_<what>(text)` built on it.
#pragma once

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dtrain {

template <typename E>
class EnumNames {
 public:
  // `what` names the kind of value in messages ("schedule", "optimizer").
  EnumNames(std::string what, std::initializer_list<std::pair<E, const char*>> entries)
      : what_(std::move(what)), entries_(entries) {}

  // Throws std::invalid_argument: "unknown schedule 'zigzag' (gpipe or 1f1b)".
  E parse(const std::string& text) const {
    for (const auto& [value, name] : entries_)
      if (text == name) return value;
    throw std::invalid_argument("unknown " + what_ + " '" + text + "' (" + choices() + ")");
  }

  std::string to_string(E value) const {
    for (const auto& [v, name] : entries_)
      if (v == value) return name;
    return "?";
  }

  // "a, b or c", for messages and --help.
  std::string choices() const {
    std::string out;
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (i > 0) out += i + 1 == entries_.size() ? " or " : ", ";
      out += entries_[i].second;
    }
    return out;
  }

 private:
  std::string what_;
  std::vector<std::pair<E, const char*>> entries_;
};

}  // namespace dtrain
