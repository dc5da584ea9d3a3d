// Errors raised by the communication layer. Every message names the ranks involved so a
// user reading one rank's output knows which peer to look at.
#pragma once

#include <stdexcept>
#include <string>

namespace dtrain::comm {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A message whose bytes do not match the checksum its sender computed (comm/group.h).
class CorruptMessage : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace dtrain::comm
