#include "dtrain/comm/token_proof.h"

#include <cstdio>
#include <random>

#include "dtrain/base/sha256.h"

namespace dtrain::comm {

std::string random_challenge() {
  std::random_device device;  // /dev/urandom on Linux
  std::string hex;
  for (int i = 0; i < 4; ++i) {
    char word[9];
    std::snprintf(word, sizeof(word), "%08x", device());
    hex += word;
  }
  return hex;
}

std::string token_proof(const std::string& token, const std::string& challenge, int64_t name) {
  return sha256_hex(std::to_string(token.size()) + ":" + token + ":" + challenge + ":" +
                    std::to_string(name));
}

}  // namespace dtrain::comm
