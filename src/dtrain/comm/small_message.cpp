#include "dtrain/comm/small_message.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

namespace dtrain::comm {

MessageWriter& MessageWriter::real(double value) {
  values_.push_back(value);
  return *this;
}

MessageWriter& MessageWriter::count(int64_t value) {
  values_.push_back(static_cast<double>(value));
  return *this;
}

at::Tensor MessageWriter::finish(at::ScalarType dtype) const {
  return at::tensor(values_, at::kDouble).to(dtype);
}

MessageReader::MessageReader(const at::Tensor& message, int64_t fields, std::string what)
    : what_(std::move(what)) {
  const bool typed = message.scalar_type() == at::kDouble || message.scalar_type() == at::kLong;
  if (!typed || message.numel() != fields)
    throw std::runtime_error("corrupt " + what_ + ": expected " + std::to_string(fields) +
                             " float64 or int64 values, got " + std::to_string(message.numel()) +
                             " of " + std::string(c10::toString(message.scalar_type())));
  const at::Tensor m = message.to(at::kDouble).contiguous().cpu();
  values_.assign(m.data_ptr<double>(), m.data_ptr<double>() + fields);
}

void MessageReader::fail(const std::string& field, const std::string& why) const {
  throw std::runtime_error("corrupt " + what_ + ": " + field + " " + why);
}

double MessageReader::real() {
  const double v = values_.at(next_++);
  if (!std::isfinite(v)) fail("value " + std::to_string(next_ - 1), "is not finite");
  return v;
}

int64_t MessageReader::count(int64_t lo, int64_t hi, const char* field) {
  const double v = values_.at(next_++);
  if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)) || v != std::floor(v))
    fail(field, std::to_string(v) + " is not an integer in " + std::to_string(lo) + ".." +
                    std::to_string(hi));
  return static_cast<int64_t>(v);
}

}  // namespace dtrain::comm
