// Small messages between ranks (a command, a result, a decision): a fixed list of numbers
// sent as one float64 tensor (or int64, for messages of integers only). A struct that crosses the
// wire defines its to_message and from_message with a MessageWriter and a MessageReader, field by
// field in one order, so the layout is written down once and a round-trip test holds it. Numbers up
// to 2^53 travel exactly; every reader checks the count and each field's range, and throws
// std::runtime_error naming the message and the field (a corrupt or mismatched peer).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::comm {

class MessageWriter {
 public:
  MessageWriter& real(double value);
  MessageWriter& count(int64_t value);  // an integer (|value| <= 2^53)
  MessageWriter& flag(bool value) { return count(value ? 1 : 0); }
  // One value per field, in order: float64, or int64 where every field is an integer.
  at::Tensor finish(at::ScalarType dtype = at::kDouble) const;
  int64_t size() const { return static_cast<int64_t>(values_.size()); }

 private:
  std::vector<double> values_;
};

class MessageReader {
 public:
  // `what` names the message in errors ("pipeline command from rank 0"). Throws unless
  // `message` holds exactly `fields` float64 (or int64) values.
  MessageReader(const at::Tensor& message, int64_t fields, std::string what);
  double real();                                             // finite
  int64_t count(int64_t lo, int64_t hi, const char* field);  // an integer in [lo, hi]
  bool flag(const char* field) { return count(0, 1, field) == 1; }
  // Throws naming `field` and why: for checks across fields.
  [[noreturn]] void fail(const std::string& field, const std::string& why) const;

 private:
  std::vector<double> values_;
  size_t next_ = 0;
  std::string what_;
};

}  // namespace dtrain::comm
