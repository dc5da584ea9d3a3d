// Proving a shared token without sending it (the rendezvous, comm/rendezvous.h; an elastic
// run's registrations, elastic/membership.h): the verifier publishes a random challenge, the
// prover publishes SHA-256 of the token, the challenge and its own name (a rank, a replica
// id), so a proof seen on the store proves nothing for another name or challenge.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::comm {

// 128 random bits as 32 hex digits (/dev/urandom).
std::string random_challenge();
// SHA-256 (hex) of the token, the challenge and `name`, lengths first so no two triples
// hash the same text.
std::string token_proof(const std::string& token, const std::string& challenge, int64_t name);

}  // namespace dtrain::comm
