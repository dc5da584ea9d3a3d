// SHA-256 (FIPS 180-4): the rendezvous proves a shared token with it (comm/world.h) without
// the token crossing the network.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace dtrain {

std::array<uint8_t, 32> sha256(const std::string& message);
std::string sha256_hex(const std::string& message);

}  // namespace dtrain
